"""The tiny recipe's step, bit for bit across a refactor: 20 steps of the smoke recipe with its
engine on a CPU slot of its own, synchronous and bounded-asynchronous at staleness 0 and 2,
against every deterministic metric recorded before the trainer became one step over a rollout
source (support/golden_metrics.json).

fp32 runs with a fixed seed are bit-identical on one CPU but not across CPU makes
(docs/platforms.md), so the values are kept per CPU signature (model name, vector ISA, torch
and vLLM versions). On a CPU without values the test still asserts what holds everywhere
(staleness 0 equals the synchronous loop on all 20 steps) and says how to record them:
`MINDRL_RECORD_GOLDEN=1 pytest tests/trainer/test_step_golden.py`, on the commit before a
change that must keep the metrics.
"""

import json
import os
import platform
import re
from pathlib import Path

import pytest

from support.grpo_runs import metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

GOLDEN = Path(__file__).resolve().parents[1] / "support" / "golden_metrics.json"
STEPS = 20
COMMON = (f"megatron_training.train_iters={STEPS}", "+generate_config.rollout_devices=1",
          "rl_config.colocate_actor_ref=true", "rl_config.val_freq=10")
RUNS = {
    "sync": COMMON,
    "bounded0": (*COMMON, "+rl_config.async_mode=bounded", "+rl_config.max_staleness=0"),
    "bounded2": (*COMMON, "+rl_config.async_mode=bounded", "+rl_config.max_staleness=2"),
}
# Seconds, rates and the asynchronous loop's overlap measures depend on the machine's load.
NON_DETERMINISTIC = ("timing_s/", "perf/", "async/")


def cpu_signature() -> str:
    """What a bit-identical fp32 run depends on: the CPU's make and vector ISA, torch, vLLM."""
    import torch
    import vllm

    model, flags = platform.processor() or "unknown", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
        flags = set(re.search(r"flags\s*:\s*(.*)", text).group(1).split())
    except (OSError, AttributeError):
        pass
    isa = sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2", "avx_vnni")))
    return f"{model} | {' '.join(isa)} | torch {torch.__version__} | vllm {vllm.__version__}"


def deterministic(rows: list) -> list:
    return [{k: v for k, v in r.items() if not k.startswith(NON_DETERMINISTIC)} for r in rows]


@pytest.fixture(scope="module")
def runs(work):
    dirs = {name: work / "runs" / f"golden_{name}" for name in RUNS}
    train_together(work, {dirs[name]: list(args) for name, args in RUNS.items()})
    return {name: deterministic(metrics(path)) for name, path in dirs.items()}


def test_staleness_0_equals_the_synchronous_loop_on_every_step(runs):
    sync, bound0 = runs["sync"], runs["bounded0"]
    assert [r["step"] for r in sync] == [r["step"] for r in bound0]
    assert sync[-1]["step"] == STEPS
    for a, b in zip(sync, bound0):
        assert {k: b[k] for k in a} == a                        # exactly
    assert any(r.get("rollout/staleness_max", 0.0) > 0 for r in runs["bounded2"])


def test_every_metric_equals_the_values_recorded_before_the_refactor(runs):
    signature = cpu_signature()
    recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("MINDRL_RECORD_GOLDEN"):
        recorded[signature] = runs
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    if signature not in recorded:
        pytest.skip(f"no values recorded on this CPU ({signature}); on the commit before a "
                    f"change, MINDRL_RECORD_GOLDEN=1 records them (the staleness-0 test above "
                    f"still compares the two loops)")
    for name, rows in runs.items():
        want = recorded[signature][name]
        assert [r["step"] for r in rows] == [r["step"] for r in want], name
        for got, expected in zip(rows, want):     # keys added since may be there too
            assert {k: got.get(k) for k in expected} == expected, (
                name, got["step"], {k: (got.get(k), v) for k, v in expected.items()
                                    if got.get(k) != v})
