"""The in-flight-sync loops of bench/bench_async.py run at bench_e2e's natural shape (free
lengths, 2 torch threads per process, the engine on a CPU slot of its own) through the benches'
MindRL runner, at the smallest size: 2 steps of 2 prompts x 2 samples of at most 32 tokens.
At 2 threads the engine's first generate on its Ray call thread crashed vLLM's CPU attention
(`thread_num (1 vs. 2)`, platforms/cpu/vllm_start.step_on_this_thread) under inflight_sync."""

import pytest

from bench import bench_async
from bench.common.mindrl_runs import mindrl_metrics
from bench.common.shapes import SHAPES, shrink
from support import run_env

SMOKE = shrink(SHAPES["natural"], steps=2, prompts=2, n=2, max_tokens=32)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """One work dir for every loop: the 75M model and the data are prepared once."""
    return tmp_path_factory.mktemp("bench_e2e")


# The loops with an in-flight sync, where the engine's generate runs on a Ray call thread
# beside the sync's (the crash above). The others (one_step, bounded2, bounded2_partial) run
# in the asynchronous e2e tests at the tiny shape (tests/trainer/test_async_grpo.py: one_step,
# bounded, partial), and their bench rows differ from these only in overrides; each mode here
# costs a CLI run (~30 s).
MODES = [m for m in bench_async.ASYNC_MODES if "inflight" in m or "recompute" in m]


@pytest.mark.slow   # a MindRL run through the CLI per loop (conftest.py)
@pytest.mark.parametrize("mode", MODES)
def test_every_async_loop_runs_at_the_natural_shape(mode, work, monkeypatch):
    assert (SMOKE.threads, SMOKE.exact_length) == (2, False)
    run_env.restore(monkeypatch)          # the run's environment is a user's (run_env.py)
    run_env.wait_for_preload()
    rows = mindrl_metrics(SMOKE, work, bench_async.overrides(mode, SMOKE))
    steps = [bench_async.async_step(row, SMOKE.completions) for row in rows]
    assert len(steps) == SMOKE.steps
    for step in steps:
        assert step["step_s"] > 0 and 0 < step["completion_length"]["max"] <= 32
        assert 0 <= step["staleness_max"] <= bench_async.BOUND[mode]
        assert "async/engine_idle_s" in rows[0]            # the asynchronous trainer ran
