"""Admission control of asynchronous GRPO's sample buffer (rollout/sample_buffer.py), without
Ray: step t's batch is admitted on weights version v only while t - 1 - v <= max_staleness,
every step is admitted and trained once, in order, and nothing is dropped."""

import pytest

from mindrl.rollout.sample_buffer import SampleBuffer


def _simulate(bound: int, start: int, last: int):
    """The asynchronous loop's order: each step admits what the bound allows on the engines'
    weights (synced after every update: version step - 1), then trains its own batch."""
    buffer, version, trained, admitted_at = SampleBuffer(bound, start, last), start, [], {}
    for step in range(start + 1, last + 1):
        for t in buffer.admissible(version):
            buffer.admit(t, version, handle=f"batch {t}")
            admitted_at[t] = step
        entry = buffer.take(step)
        trained.append((step, SampleBuffer.staleness(step, entry.version), admitted_at[step]))
        version = step                   # the update, then the sync
    assert buffer.held() == []
    return trained


@pytest.mark.parametrize("bound", [0, 1, 2, 3])
def test_no_trained_batch_exceeds_the_bound_and_the_steady_state_reaches_it(bound):
    trained = _simulate(bound, 0, 8)
    assert [s for s, _, _ in trained] == list(range(1, 9))      # each step once, in order
    staleness = [k for _, k, _ in trained]
    assert max(staleness) == bound
    # Step t's batch is generated on version 0 while t <= bound + 1, then bound behind.
    assert staleness == [min(t - 1, bound) for t in range(1, 9)]
    # At bound 0 every step submits its own batch (the synchronous loop); above, step 1
    # submits bound + 1 batches, then one per step.
    assert [a for _, _, a in trained] == [max(t - bound, 1) for t in range(1, 9)]


def test_a_resumed_run_starts_after_its_checkpoint_and_never_runs_past_the_last_step():
    trained = _simulate(2, 5, 8)
    assert [(s, k) for s, k, _ in trained] == [(6, 0), (7, 1), (8, 2)]
    buffer = SampleBuffer(2, 5, 8)
    assert buffer.admissible(5) == [6, 7, 8]          # not 9: the run ends at 8
    assert buffer.admissible(3) == [6]                # 6 - 1 - 3 = 2; 7 would be 3 stale


def test_a_batch_past_the_bound_or_out_of_order_is_refused():
    buffer = SampleBuffer(1, 2, 10)                   # resumed after step 2; next is 3
    with pytest.raises(ValueError, match="2 versions stale"):
        buffer.admit(3, 0, "stale")                   # 3 - 1 - 0 = 2 > 1
    buffer.admit(3, 1, "a")
    with pytest.raises(ValueError, match="out of order"):
        buffer.admit(5, 2, "skips 4")
    with pytest.raises(ValueError, match="2 versions stale"):
        buffer.admit(4, 1, "step 4 on version 1")
    buffer.admit(4, 2, "b")
    assert buffer.admissible(2) == []                 # step 5 on version 2 would be 2 stale
    with pytest.raises(KeyError):
        buffer.take(4)                                # step 3 first
    assert buffer.take(3).handle == "a" and [e.step for e in buffer.held()] == [4]


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_the_bound_is_an_integer_at_least_0(bad):
    with pytest.raises(ValueError, match="max_staleness"):
        SampleBuffer(bad, 0, 4)
