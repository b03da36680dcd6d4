"""bench/device/check_device.py can fail: every threshold and every true/false figure is judged; part 5
(packed vs padded) runs on the CPU at a small size without vLLM or Ray."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device" / "check_device.py"


def _check_device():
    spec = importlib.util.spec_from_file_location("check_device", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_figure_past_its_limit_a_nan_or_a_false_flag_fails_and_nothing_else():
    failures = _check_device().failures
    good = {"logits_max_diff": 0.0, "logprob_max_diff": 9.5e-7, "rollout_logprob_gap": 4.8e-7,
            "grad_norm_finite_float32": True, "sleep2_sync_verified": True,
            "sleep2_freed_gib": 0.0, "update_s_float32": 99.0}
    assert failures(good) == []
    assert failures({"logits_max_diff": 0.0}) == []           # parts skipped: nothing judged
    bad = dict(good, rollout_logprob_gap=2e-4, logprob_max_diff=math.nan,
               sleep2_sync_verified=False, grad_norm_finite_float32=False)
    assert sorted(line.split()[0] for line in failures(bad)) == [
        "grad_norm_finite_float32", "logprob_max_diff", "rollout_logprob_gap",
        "sleep2_sync_verified"]


def test_natural_batch_lengths_and_the_packed_budget():
    module = _check_device()
    b = module.natural_batch(1024, 64, 128, 1024, seed=7)
    prompts, responses = b["prompt_mask"].sum(1), b["response_mask"].sum(1)
    assert prompts.min() >= 16 and prompts.max() <= 128
    assert responses.min() >= 1 and responses.max() <= 1024
    # right-padded to the longest response, as a rollout returns them; mostly short
    assert b["response_ids"].shape[1] == int(responses.max())
    assert responses.float().mean() < 0.45 * 1024
    layout = module.pack_layout(b)
    assert layout["real_tokens"] == int(prompts.sum() + responses.sum())
    assert layout["budget"] == module.PACK_MICRO_BATCH * max(layout["lengths"])
    assert layout["padded_tokens"] == 64 * (int(prompts.max()) + int(responses.max()))


@pytest.mark.slow   # the script in a process of its own, building Megatron models (conftest.py)
def test_a_cpu_run_without_vllm_or_ray_passes_and_reports_part_5(tmp_path):
    """The GPU machine has neither vLLM nor Ray: --no-rollout must not import them (they are
    made unimportable here). Part 5 at a small size: packed fp32 within its limits, the bf16
    figures and attention path reported, both layouts timed."""
    out = tmp_path / "figures.json"
    args = ["--no-rollout", "--steps", "0", "--pack-samples", "8", "--pack-prompt", "16",
            "--pack-response", "24", "--pack-steps", "1", "--pack-model", "tiny-qwen2",
            "--pack-timing-samples", "8", "--pack-timing-prompt", "16",
            "--pack-timing-response", "32", "--json-out", str(out)]
    runner = ("import runpy, sys\n"
              "sys.modules['vllm'] = sys.modules['ray'] = None\n"
              f"sys.argv = [{str(SCRIPT)!r}] + {args!r}\n"
              f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    env = dict(os.environ, MINDRL_DEVICE="cpu", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", runner], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == figures
    assert figures["failed"] == [] and figures["skipped"] == []
    assert figures["packed_logprob_max_diff_fp32"] <= 1e-5
    assert figures["packed_grad_rel_diff_fp32"] <= 1e-5
    # bf16 differs by rounding, but not by a broken layout (which gives O(1) differences)
    assert figures["packed_logprob_max_diff_bf16"] < 0.1
    assert figures["packed_attention_bf16"] == "sdpa-per-sequence"   # no CPU varlen kernel
    for layout in ("padded", "packed"):
        assert figures[f"pack_step_s_{layout}_bfloat16"] > 0
        assert figures[f"pack_grad_norm_finite_{layout}_bfloat16"] is True
    assert figures["pack_timing_real_tokens"] < figures["pack_timing_padded_tokens"]
