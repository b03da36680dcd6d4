"""WorkerPool with concurrency > 1 (the tool pool's mode; verifiers keep 1): jobs of one
worker run at once, each with its own deadline; a job past it times out while the others
answer or are sent again; a worker dying under several jobs isolates them; a job waiting at
its kind's gate does not count the wait. The kind is tests/support/pool_kinds.py."""

import time

import pytest

from mindrl.rewards.pool import ERROR, OK, TIMEOUT, WorkerPool

from support.pool_kinds import KIND


def pool(**kw):
    return WorkerPool(KIND, num_workers=kw.pop("num_workers", 1), name="test", **kw)


def test_eight_naps_of_half_a_second_overlap_on_one_worker():
    with pool(timeout=5.0, concurrency=8) as p:
        p.map([("nap", 0.0)])                 # the worker is up
        start = time.monotonic()
        out = p.map([("nap", 0.5)] * 8)
        took = time.monotonic() - start
    assert [o.status for o in out] == [OK] * 8
    assert took < 2.0, took                   # one after another: 4 s


def test_replies_in_any_order_settle_their_own_jobs():
    with pool(timeout=5.0, concurrency=4) as p:
        out = p.map([("nap", 0.6), ("nap", 0.0), ("nap", 0.3), ("nap", 0.1)])
    assert [o.value for o in out] == [0.6, 0.0, 0.3, 0.1]


def test_more_jobs_than_places_keep_the_worker_full_as_replies_come():
    with pool(timeout=5.0, concurrency=3) as p:
        p.map([("nap", 0.0)])
        start = time.monotonic()
        out = p.map([("nap", 0.3)] * 9)      # three waves of three
        took = time.monotonic() - start
    assert [o.status for o in out] == [OK] * 9
    assert 0.85 < took < 2.5, took


def test_a_job_past_its_deadline_times_out_and_the_others_answer():
    with pool(timeout=1.0, concurrency=4) as p:
        pids = p.pids()
        start = time.monotonic()
        out = p.map([("nap", 0.2), ("hang", 0), ("nap", 0.3), ("nap", 0.1)])
        took = time.monotonic() - start
        assert [o.status for o in out] == [OK, TIMEOUT, OK, OK]
        assert [out[i].value for i in (0, 2, 3)] == [0.2, 0.3, 0.1]
        assert p.restarts == 1 and p.pids() != pids
        assert took < 4.0, took
        assert p.map([("nap", 0.0)])[0].status == OK       # the new worker answers


def test_a_job_still_in_time_when_its_worker_is_killed_runs_again():
    # places 2: hang and nap(1.0) start at once; at 1.0 s nap(1.3) takes the free place; at
    # 2.0 s hang's deadline kills the worker with nap(1.3) running, 0.7 s of its 2 s left:
    # it is sent again, whole, to the new worker and answers.
    with pool(timeout=2.0, concurrency=2) as p:
        out = p.map([("hang", 0), ("nap", 1.0), ("nap", 1.3)])
        assert [o.status for o in out] == [TIMEOUT, OK, OK]
        assert out[2].value == 1.3 and p.restarts == 1


def test_a_worker_dying_under_several_jobs_blames_only_the_one_that_kills():
    with pool(timeout=5.0, concurrency=4) as p:
        out = p.map([("nap", 0.5), ("exit", 0.1), ("nap", 0.5), ("nap", 0.4)])
        assert [o.status for o in out] == [OK, ERROR, OK, OK]
        assert out[1].detail.startswith("worker process died")
        # the death under three running jobs, then the exit again, alone
        assert p.restarts == 2
        assert p.map([("nap", 0.0)])[0].status == OK


def test_a_wait_at_the_gate_is_not_counted_against_the_deadline():
    # three gated naps of 0.6 s pass a gate of one: 1.8 s in all under a 1 s deadline each
    with pool(timeout=1.0, concurrency=4) as p:
        start = time.monotonic()
        out = p.map([("gated", 0.6)] * 3 + [("nap", 0.1)])
        took = time.monotonic() - start
        assert [o.status for o in out] == [OK] * 4 and p.restarts == 0
    assert took >= 1.8, took                  # the gate held them one at a time


def test_a_gated_job_past_its_deadline_still_times_out():
    with pool(timeout=0.5, concurrency=2) as p:
        out = p.map([("gated", 2.0), ("gated", 0.1)])
        assert [o.status for o in out] == [TIMEOUT, OK] and p.restarts == 1


def test_many_jobs_across_two_workers_each_answer_its_own():
    with pool(timeout=5.0, concurrency=8, num_workers=2) as p:
        out = p.map([("nap", (i % 5) / 100) for i in range(200)])
        assert p.restarts == 0
    assert [o.value for o in out] == [(i % 5) / 100 for i in range(200)]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_concurrency_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1"):
        WorkerPool(KIND, concurrency=bad)
