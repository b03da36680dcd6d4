"""bench/profile_generate.py: its FLOP count and op buckets by hand, and one run of the script
end to end on the tiny model (vLLM through MindRL's engine, the profiler, the JSON line)."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from support import run_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "profile_generate.py"


@pytest.fixture(scope="module")
def profile_generate():
    spec = importlib.util.spec_from_file_location("profile_generate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generation_costs_one_forward_over_all_but_the_last_token(profile_generate):
    from bench.common.flops import FlopModel

    flops = FlopModel(weights=10, layers=2, q_width=4)
    # 1 row, prompt 2, 2 new tokens: the forwards see 3 tokens (the last sampled is never fed
    # back): weights 2 x 10 x 3 = 60, attention 4 x 4 x 2 x (1 + 2 + 3) = 192.
    assert profile_generate.forward_tokens(1, 2, 2) == 3
    assert profile_generate.generate_flops(flops, 1, 2, 2) == 252 == flops.forward(3)
    assert profile_generate.generate_flops(flops, 64, 12, 256) == 64 * flops.forward(267)


def test_ops_fall_into_gemm_attention_and_the_rest(profile_generate):
    seconds = profile_generate.bucket_seconds([
        ("_C::onednn_mm", 3.0), ("aten::mm", 1.0), ("_C::cpu_attention_with_kv_cache", 0.5),
        ("_C::cpu_attn_reshape_and_cache", 0.25), ("vllm::unified_attention_with_output", 0.125),
        ("aten::mul", 2.0), ("aten::linear", 0.0625)])
    assert seconds == {"gemm": 4.0, "attention": 0.875, "other": 2.0625}


@pytest.mark.slow
def test_the_script_profiles_the_tiny_model(tmp_path):
    out = tmp_path / "profile.json"
    proc = subprocess.run(
        [run_env.python(), str(SCRIPT), "--model", "tiny-qwen2", "--threads", "1", "--prompts",
         "2", "--n", "2", "--prompt-len", "5", "--max-tokens", "6", "--profile-tokens", "3",
         "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=run_env.for_a_run())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["rows"] == 4 and result["max_tokens"] == 6
    assert result["gen_s"] > 0 and result["decode_step_ms"] == pytest.approx(
        1e3 * result["gen_s"] / 6)
    assert result["gemm_ms_per_step"] > 0 and result["attention_ms_per_step"] > 0
    assert {op["bucket"] for op in result["top_ops"]} <= {"gemm", "attention", "other"}
    assert result["gen_over_flop_floor"] == pytest.approx(
        result["gen_s"] / result["flop_floor_s"])
