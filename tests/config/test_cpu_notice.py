"""The CPU device overrides some generate_config values; the run says which, once."""

import importlib.util

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.cpu_notice import cpu_notices, run_cpu_vllm
from mindrl.paths import REPO_ROOT

CPU2 = ClusterResources("cpu", 2)


def tiny(*overrides):
    return load_recipe("grpo_tiny_cpu", list(overrides), cluster=CPU2)


def test_a_recipe_written_for_cpu_gets_no_notice():
    assert cpu_notices(tiny()) == []


def test_each_overridden_value_is_named_with_what_runs():
    lines = cpu_notices(tiny("generate_config.dtype=bfloat16",
                             "generate_config.enforce_eager=false",
                             "+generate_config.gpu_memory_utilization=0.9"))
    assert len(lines) == 3, lines
    dtype, eager, memory = lines
    assert "generate_config.dtype='bfloat16'" in dtype and "dtype='float32'" in dtype
    assert "generate_config.enforce_eager=False" in eager and "enforce_eager=True" in eager
    assert "gpu_memory_utilization=0.9" in memory and "kv_cache_memory_bytes" in memory


def test_only_values_that_differ():
    lines = cpu_notices(tiny("generate_config.enforce_eager=false"))
    assert len(lines) == 1 and "enforce_eager" in lines[0]


def test_the_engine_runs_what_the_notice_says():
    from mindrl.engines.vllm_engine import llm_kwargs
    from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild

    run = tiny("generate_config.dtype=bfloat16", "generate_config.enforce_eager=false")
    kw = llm_kwargs(run.generate_config, seed=1, logprobs_mode="processed_logprobs",
                    build=CPUVLLMBuild(), actor_dtype=run.actor_config.params_dtype)
    runs = run_cpu_vllm(run)
    assert {k: kw[k] for k in runs} == runs == {"dtype": "float32", "enforce_eager": True}
    assert "gpu_memory_utilization" not in kw


def test_vllm_computes_in_bf16_beside_a_bf16_actor_and_only_there():
    """A bf16 actor (allowed only on a CPU with bf16 instructions: test_config_bf16.py) and
    generate_config.dtype bfloat16: vLLM runs bf16, with no notice; an fp32 actor keeps it
    fp32 whatever the recipe's vLLM dtype, and an engine outside a run is fp32."""
    from mindrl.engines.vllm_engine import llm_kwargs
    from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild

    both = tiny("megatron_training.bf16=true", "generate_config.dtype=bfloat16")
    assert run_cpu_vllm(both)["dtype"] == "bfloat16"
    assert not any("dtype" in line for line in cpu_notices(both))
    kw = llm_kwargs(both.generate_config, seed=1, logprobs_mode="processed_logprobs",
                    build=CPUVLLMBuild(), actor_dtype=both.actor_config.params_dtype)
    assert kw["dtype"] == "bfloat16"
    assert llm_kwargs(both.generate_config, seed=1, logprobs_mode="processed_logprobs",
                      build=CPUVLLMBuild())["dtype"] == "float32"
    actor_only = tiny("megatron_training.bf16=true")          # the recipe's vLLM: float32
    assert run_cpu_vllm(actor_only)["dtype"] == "float32" and cpu_notices(actor_only) == []


def test_the_cli_prints_them_on_cpu(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("train_grpo_cli",
                                                  REPO_ROOT / "cli" / "train_grpo.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    from mindrl import device

    run = tiny("generate_config.dtype=bfloat16")
    monkeypatch.setattr(device, "is_cpu", lambda: True)
    cli.print_device_notices(run)
    assert capsys.readouterr().out.startswith("notice: generate_config.dtype='bfloat16'")
    monkeypatch.setattr(device, "is_cpu", lambda: False)
    cli.print_device_notices(run)
    assert capsys.readouterr().out == ""


def test_sleep_level_is_said_to_do_nothing_on_cpu_and_reaches_vllm_elsewhere():
    """The GPU/NPU engines start in vLLM's sleep mode only when a level asks for it (its
    allocator costs memory); on CPU the level is named as doing nothing."""
    from mindrl.config import ConfigError
    from mindrl.engines.vllm_engine import llm_kwargs
    from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild
    from mindrl.platforms.vllm_build import VLLMBuild

    run = tiny("+generate_config.sleep_level=2")
    (line,) = cpu_notices(run)
    assert "generate_config.sleep_level=2 does nothing on CPU" in line
    device_kw = llm_kwargs(run.generate_config, 1, "processed_logprobs", VLLMBuild())
    assert device_kw["enable_sleep_mode"] is True
    assert llm_kwargs(tiny().generate_config, 1, "processed_logprobs",
                      VLLMBuild())["enable_sleep_mode"] is False
    assert "enable_sleep_mode" not in llm_kwargs(run.generate_config, 1, "processed_logprobs",
                                                 CPUVLLMBuild())
    with pytest.raises(ConfigError, match="generate_config.sleep_level"):
        tiny("+generate_config.sleep_level=3")
