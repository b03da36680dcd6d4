"""bench/check_device.py can fail: every threshold and every true/false figure is judged."""

import importlib.util
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "check_device.py"


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
