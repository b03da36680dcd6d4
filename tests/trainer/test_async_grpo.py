"""Asynchronous GRPO end to end (trainer/async_source.py), the tiny recipe with its engine
on a CPU slot of its own, three steps: at max_staleness 0 the metrics equal the synchronous
loop's exactly (same seed, same layout, dynamic sampling on); at one_step the samples of every
step after the first were generated one version behind, the engine generated while the actor
trained, the decoupled objective's weights are logged and validation runs; partial rollouts
and an in-flight sync run their loops. The runs go at once, each with its own Ray cluster
(fp32 and seeded: none's numbers depend on the others)."""

import json
import signal
import subprocess
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from support.grpo_runs import metrics, start, train, train_together

from mindrl.processes import pid_alive

pytestmark = pytest.mark.slow   # see tests/conftest.py

OWN_ENGINE = ("megatron_training.train_iters=3", "+generate_config.rollout_devices=1",
              "rl_config.colocate_actor_ref=true", "rl_config.val_before_train=false")
NO_VALIDATION = "rl_config.val_freq=null"
NON_DETERMINISTIC = ("timing_s/", "perf/", "async/")


@pytest.fixture(scope="module")
def runs(work):
    dirs = {name: work / "runs" / f"async_{name}"
            for name in ("sync", "bound0", "one_step", "partial", "inflight")}
    train_together(work, {
        dirs["sync"]: [*OWN_ENGINE, NO_VALIDATION],
        dirs["bound0"]: [*OWN_ENGINE, NO_VALIDATION, "+rl_config.async_mode=bounded",
                         "+rl_config.max_staleness=0"],
        # without dynamic sampling's fresh rounds every sample of a step is one version old
        dirs["one_step"]: [*OWN_ENGINE, "+rl_config.async_mode=one_step",
                           "rl_config.dynamic_sampling=false", "rl_config.val_freq=3"],
        # partial rollouts one token at a time, with dynamic sampling's whole extra rounds
        dirs["partial"]: [*OWN_ENGINE, NO_VALIDATION, "+rl_config.async_mode=one_step",
                          "+rl_config.partial_rollout_tokens=1"],
        # the sync lands between the engine's decode steps, every sync verified
        dirs["inflight"]: [*OWN_ENGINE, NO_VALIDATION, "+rl_config.async_mode=bounded",
                           "+rl_config.max_staleness=2", "+rl_config.inflight_sync=recompute_kv",
                           "generate_config.verify_sync=every"]})
    return {name: metrics(path) for name, path in dirs.items()} | {"dirs": dirs}


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
    # each sample's staleness, a histogram per step in tensorboard: 128 samples at 0, then at 1
    acc = EventAccumulator(str(runs["dirs"]["one_step"] / "tensorboard"),
                           size_guidance={"histograms": 0})        # 0: keep every step
    acc.Reload()
    hists = [(e.step, e.histogram_value.num, e.histogram_value.min, e.histogram_value.max)
             for e in acc.Histograms("rollout/staleness")]
    assert hists == [(1, 128, 0.0, 0.0), (2, 128, 1.0, 1.0), (3, 128, 1.0, 1.0)], hists
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
    # a batch is scored once: during the last update when it was done before the update was
    # (not in the step's phases), else in the step (which comes first is the machine's load:
    # tests/trainer/test_async_source.py scores one ahead deterministically)
    for r in rows:
        assert (r["timing_s/reward_ahead"] > 0) != (r["timing_s/reward"] > 0), r
    assert rows[0]["timing_s/reward_ahead"] == 0.0          # nothing updated before step 1
    assert all(0.0 <= r["critic/score/mean"] <= 1.0 for r in rows)


def test_a_killed_async_run_resumes_and_regenerates_what_was_in_flight(work):
    """SIGKILL the driver of a one_step run right after its step-2 checkpoint (step 3's batch
    already generated, on version 1, and not yet trained on). Nothing of the buffer is saved:
    the rerun resumes from 2, generates step 3's batch again on the restored weights (version
    2, so 0 versions stale), and is one step off again from step 4; every step is logged once
    and no worker outlives the killed driver."""
    run_dir = work / "runs" / "async_killed"
    args = (*OWN_ENGINE[1:], "megatron_training.train_iters=4", "rl_config.save_freq=2",
            "+rl_config.async_mode=one_step", "rl_config.dynamic_sampling=false", NO_VALIDATION)
    proc = start(work, run_dir, *args, stdout=subprocess.DEVNULL)
    latest = run_dir / "latest_checkpointed_iteration.txt"
    deadline = time.time() + 600
    while proc.poll() is None and time.time() < deadline and not (
            latest.exists() and latest.read_text() == "2"):
        time.sleep(0.002)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_steps = [r["step"] for r in metrics(run_dir)]
    assert killed_steps[:2] == [1, 2] and killed_steps[-1] < 4, killed_steps
    workers = json.loads((run_dir / "workers.json").read_text())
    pids = workers["actor"] + workers["rollout"]
    deadline = time.time() + 60
    while any(map(pid_alive, pids)) and time.time() < deadline:
        time.sleep(0.5)
    assert not [p for p in pids if pid_alive(p)], "a worker outlived the killed driver"

    out = train(work, run_dir, *args).stdout
    assert "resumed from" in out and "iter_0000002" in out, out[-2000:]
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]                 # each step once
    assert rows[1]["rollout/staleness_max"] == 1.0                  # before the kill
    assert (rows[2]["rollout/staleness_max"], rows[2]["rollout/policy_version"]) == (0.0, 2)
    assert rows[3]["rollout/staleness_max"] == 1.0                  # one step off again
    assert latest.read_text() == "4"


def test_partial_rollouts_train_with_dynamic_sampling_s_extra_rounds(runs):
    """One token per chunk (the smoke recipe answers in up to 3): every step's batch was
    generated in chunks, and dynamic sampling topped it up with whole generations on the
    current weights; the two join into one batch (each token knows its version)."""
    rows = runs["partial"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert max(r["dynamic_sampling/rounds"] for r in rows) > 1       # the extra rounds ran
    for r in rows:
        assert 0.0 <= r["rollout/crossed_update_frac"] <= 1.0
        assert r["rollout/staleness_max"] <= 1.0
    # Step 1 trains on the start's weights: the log-probs vLLM returned chunk by chunk, joined,
    # are the actor's on the same tokens (later steps' samples are a version old).
    assert rows[0]["rollout/staleness_max"] == 0.0
    assert rows[0]["rollout/logprob_diff_max"] < 1e-4


def test_an_inflight_sync_does_not_wait_for_the_batches_in_flight_and_is_verified(runs):
    """Bound 2: the three steps' batches are submitted at the start and generate while the
    actor trains and syncs; no sync waits for them (the drain is the loop's bookkeeping
    only), every sync's fingerprints match after the engine took it in between two decode
    steps, and every token records its version."""
    rows = runs["inflight"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["weight_sync/verified"] == 1.0
        assert r["timing_s/drain"] < 0.05
        assert r["rollout/staleness_max"] <= 2.0
        assert 0.0 <= r["rollout/crossed_update_frac"] <= 1.0
