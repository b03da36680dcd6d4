"""bench/bench_moe.py: the dense twin has the MoE model's active parameters (less the router),
and one run of the script on the tiny shapes gives its JSON line."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch

from mindrl.config.model_spec import load_model_spec
from support import run_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_moe.py"


@pytest.fixture(scope="module")
def bench_moe():
    spec = importlib.util.spec_from_file_location("bench_moe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["tiny-qwen3-moe", "qwen3-30b-a3b"])
def test_the_dense_twin_has_the_active_parameters_less_the_router(bench_moe, name):
    spec = load_model_spec(name)
    twin = bench_moe.dense_twin(spec)
    assert not twin.is_moe and twin.architecture == "qwen3"
    assert twin.ffn_hidden_size == spec.moe.router_topk * spec.moe.ffn_hidden_size
    router = bench_moe.router_parameters(spec)
    assert router == spec.hidden_size * spec.moe.num_experts * spec.num_layers
    assert twin.num_parameters() + router == spec.num_parameters(active=True)


@pytest.mark.slow   # the bench in a process of its own, timing Megatron updates (conftest.py)
def test_bench_runs_on_the_tiny_shapes(tmp_path):
    proc = subprocess.run([run_env.python(), str(SCRIPT), "--samples", "4", "--prompt", "8",
                           "--response", "16", "--repeats", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=run_env.for_a_run())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["bench"] == "moe" and line["experts"] == 8 and line["top_k"] == 2
    for key in ("moe_tokens_per_s", "moe_sequential_tokens_per_s", "dense_tokens_per_s",
                "update_ratio", "sync_ratio"):
        assert line[key] > 0, key
    from mindrl import device

    grouped_here = device.grouped_gemm(torch.float32) is not None      # asked, as the bench
    assert ("grouped_ratio" in line) == grouped_here
    assert line.get("grouped_ratio", 1.0) > 0
    assert line["expert_kernel"] in ("grouped", "sequential")
    assert line["moe_tokens_per_s"] == line[f"moe_{line['expert_kernel']}_tokens_per_s"]
    assert line["moe_sync_bytes"] > line["dense_sync_bytes"]   # every expert is sent
