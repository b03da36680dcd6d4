"""What the CPU device changes of a recipe's vLLM settings, said once at start-up.

On CPU the rollout engine runs vLLM in float32 (bf16 logprobs differ from the trainer's by
about 0.04), eagerly (no graph compilation there), and sizes its KV cache by
kv_cache_memory_bytes, never gpu_memory_utilization. The engine reads CPU_VLLM from here,
so the notice and what runs cannot drift apart. Pure: the caller (the CLI) asks device.py
whether the run is on CPU.
"""

from __future__ import annotations

import dataclasses

from mindrl.config.schema import GenerateConfig, RunConfig

# generate_config keys the CPU device sets regardless of the recipe.
CPU_VLLM = {"dtype": "float32", "enforce_eager": True}
_WHY = {"dtype": "bf16/fp16 logprobs would differ from the trainer's",
        "enforce_eager": "vLLM compiles no graphs on CPU"}


def cpu_notices(run: RunConfig) -> list[str]:
    """One line per generate_config value the CPU device overrides (only values that differ
    from what runs), so a recipe never believes a setting that is not in effect."""
    gen = run.generate_config
    out = [f"generate_config.{key}={getattr(gen, key)!r} is overridden on CPU: vLLM runs "
           f"with {key}={value!r} ({_WHY[key]})"
           for key, value in CPU_VLLM.items() if getattr(gen, key) != value]
    default = {f.name: f.default for f in dataclasses.fields(GenerateConfig)}
    if gen.gpu_memory_utilization != default["gpu_memory_utilization"]:
        out.append(f"generate_config.gpu_memory_utilization={gen.gpu_memory_utilization!r} "
                   "is not read on CPU: vLLM's KV cache there is "
                   "generate_config.kv_cache_memory_bytes")
    if gen.sleep_level:
        out.append(f"generate_config.sleep_level={gen.sleep_level} does nothing on CPU: vLLM's "
                   "CPU build has no sleep mode, so the engines keep their memory")
    return out
