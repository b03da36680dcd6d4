"""Asynchronous GRPO end to end (trainer/async_trainer.py), the tiny recipe with its engine
on a CPU slot of its own, three steps: at max_staleness 0 the metrics equal the synchronous
loop's exactly (same seed, same layout, dynamic sampling on); at one_step the samples of every
step after the first were generated one version behind, the engine generated while the actor
trained, the decoupled objective's weights are logged and validation runs. The three runs go
at once, each with its own Ray cluster (fp32 and seeded: none's numbers depend on the
others)."""

import pytest

from support.grpo_runs import metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

OWN_ENGINE = ("megatron_training.train_iters=3", "+generate_config.rollout_devices=1",
              "rl_config.colocate_actor_ref=true", "rl_config.val_before_train=false")
NO_VALIDATION = "rl_config.val_freq=null"
NON_DETERMINISTIC = ("timing_s/", "perf/", "async/")


@pytest.fixture(scope="module")
def runs(work):
    dirs = {name: work / "runs" / f"async_{name}" for name in ("sync", "bound0", "one_step")}
    train_together(work, {
        dirs["sync"]: [*OWN_ENGINE, NO_VALIDATION],
        dirs["bound0"]: [*OWN_ENGINE, NO_VALIDATION, "+rl_config.async_mode=bounded",
                         "+rl_config.max_staleness=0"],
        # without dynamic sampling's fresh rounds every sample of a step is one version old
        dirs["one_step"]: [*OWN_ENGINE, "+rl_config.async_mode=one_step",
                           "rl_config.dynamic_sampling=false", "rl_config.val_freq=3"]})
    return {name: metrics(path) for name, path in dirs.items()}


def test_staleness_0_gives_the_synchronous_loop_s_metrics_exactly(runs):
    sync, bound0 = runs["sync"], runs["bound0"]
    assert [r["step"] for r in bound0] == [1, 2, 3]
    for a, b in zip(sync, bound0):
        keys = {k for k in a if not k.startswith(NON_DETERMINISTIC)}
        assert keys <= set(b)
        assert {k: b[k] for k in keys} == {k: a[k] for k in keys}       # exactly
        assert b["rollout/staleness_max"] == 0.0 and b["rollout/stale_fraction"] == 0.0
        assert b["timing_s/old_log_prob"] == 0.0        # on-policy: no proximal pass needed


def test_one_step_trains_on_samples_one_version_old_while_the_engine_generates(runs):
    rows = runs["one_step"]
    assert rows[0]["rollout/staleness_max"] == 0.0              # step 1: the start's weights
    for r in rows[1:]:
        assert r["rollout/staleness_max"] == 1.0 and r["rollout/staleness_mean"] == 1.0
        assert r["rollout/stale_fraction"] == 1.0
        assert r["rollout/policy_version"] == r["step"] - 2
    # the decoupled objective: the behaviour weights are logged (rollout_is off means token)
    assert all("rollout/is_weight_mean" in r for r in rows)
    assert any(r["rollout/is_weight_mean"] != 1.0 for r in rows[1:])
    # the engine generated step t + 1's batch while the actor trained on step t's
    assert max(r["async/overlap_fraction"] for r in rows) > 0
    assert all(0 <= r["async/overlap_fraction"] <= 1 for r in rows)
    # validation runs between steps, on the synced weights, nothing in flight
    assert [("val/score" in r) for r in rows] == [False, False, True]
