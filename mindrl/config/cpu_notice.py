"""What the CPU device changes of a recipe's vLLM settings, said once at start-up.

On CPU the rollout engine runs vLLM in the actor's dtype: bfloat16 where the recipe puts both
the actor and vLLM in it (a bf16 actor is only allowed on a CPU with bf16 instructions:
config/checks/dtype.py), else float32 (an fp32 actor's log-probs and bf16 vLLM's would differ by
about 0.04); eagerly (no graph compilation there); and sizes its KV cache by
kv_cache_memory_bytes, never gpu_memory_utilization. The engine reads `cpu_vllm` from here,
so the notice and what runs cannot drift apart. Pure: the caller (the CLI) asks device.py
whether the run is on CPU.
"""

from __future__ import annotations

import dataclasses

from mindrl.config.schema import GenerateConfig, RunConfig

_WHY = {"dtype": "vLLM computes in the actor's dtype on CPU: bfloat16 only with a bf16 actor",
        "enforce_eager": "vLLM compiles no graphs on CPU"}


def cpu_vllm(vllm_dtype: str, actor_dtype: str | None) -> dict:
    """The generate_config values vLLM's CPU build runs with, whatever the recipe says:
    bfloat16 where both vLLM and the actor ask for it, else float32; always eager.
    actor_dtype None (an engine outside a run: tests, benches): float32."""
    dtype = "bfloat16" if vllm_dtype == actor_dtype == "bfloat16" else "float32"
    return {"dtype": dtype, "enforce_eager": True}


def run_cpu_vllm(run: RunConfig) -> dict:
    """`cpu_vllm` of a run: its vLLM dtype against its actor's."""
    return cpu_vllm(run.generate_config.dtype, run.actor_config.params_dtype)


def cpu_notices(run: RunConfig) -> list[str]:
    """One line per generate_config value the CPU device overrides (only values that differ
    from what runs), so a recipe never believes a setting that is not in effect."""
    gen = run.generate_config
    out = [f"generate_config.{key}={getattr(gen, key)!r} is overridden on CPU: vLLM runs "
           f"with {key}={value!r} ({_WHY[key]})"
           for key, value in run_cpu_vllm(run).items() if getattr(gen, key) != value]
    default = {f.name: f.default for f in dataclasses.fields(GenerateConfig)}
    if gen.gpu_memory_utilization != default["gpu_memory_utilization"]:
        out.append(f"generate_config.gpu_memory_utilization={gen.gpu_memory_utilization!r} "
                   "is not read on CPU: vLLM's KV cache there is "
                   "generate_config.kv_cache_memory_bytes")
    if gen.sleep_level:
        out.append(f"generate_config.sleep_level={gen.sleep_level} does nothing on CPU: vLLM's "
                   "CPU build has no sleep mode, so the engines keep their memory")
    return out
