"""The StepGate lets another thread's work at vLLM only between two engine steps: at once while
no generate runs, else after the generate's current step; never inside a step, never lost."""

import threading
import time

import pytest

from mindrl.engines.step_gate import GateTimeout, StepGate


def test_work_runs_at_once_when_no_generate_runs():
    gate = StepGate()
    assert gate.run(lambda: 7) == 7


def test_work_waits_for_the_end_of_the_running_step_and_never_runs_inside_one():
    """A fake generate of 5 steps, each 20 ms, marks when it is inside a step; work submitted
    from another thread after step 1 runs at that step's end, outside every step."""
    gate, log, inside = StepGate(), [], [False]
    submitted = threading.Event()

    def generate():
        with gate.generating():
            for step in range(5):
                inside[0] = True
                time.sleep(0.02)
                log.append(("step", step))
                inside[0] = False
                if step == 1:
                    submitted.wait(5)
                    time.sleep(0.05)      # the worker thread is waiting in gate.run by now
                gate.between_steps()

    thread = threading.Thread(target=generate)
    thread.start()
    while len(log) < 2:                  # step 1 ended; the generate waits before its gate
        time.sleep(0.001)

    def work():
        log.append(("work", inside[0]))
        return "done"

    result = [None]
    worker = threading.Thread(target=lambda: result.__setitem__(0, gate.run(work, 5)))
    worker.start()
    submitted.set()
    worker.join(5)
    thread.join(5)
    assert result[0] == "done"
    assert log.index(("work", False)) == 2        # after step 1 ended, before step 2
    assert [e for e in log if e[0] == "step"] == [("step", i) for i in range(5)]
    assert gate.steps == 5


def test_work_queued_after_the_last_step_runs_before_the_generate_returns():
    gate, ran = StepGate(), []
    entered, release = threading.Event(), threading.Event()

    def generate():
        with gate.generating():
            entered.set()
            release.wait(5)              # no between_steps call at all

    thread = threading.Thread(target=generate)
    thread.start()
    entered.wait(5)
    worker = threading.Thread(target=lambda: gate.run(lambda: ran.append(1), 5))
    worker.start()
    time.sleep(0.05)
    assert ran == []                   # queued: the generate holds the engine
    release.set()
    thread.join(5)
    worker.join(5)
    assert ran == [1]


def test_an_error_reaches_the_caller_and_a_stuck_generate_times_out():
    gate = StepGate()
    with pytest.raises(ZeroDivisionError):
        gate.run(lambda: 1 / 0)
    release = threading.Event()

    def stuck():
        with gate.generating():
            release.wait(5)

    thread = threading.Thread(target=stuck)
    thread.start()
    time.sleep(0.02)
    ran = []
    with pytest.raises(GateTimeout, match="within 0 s"):
        gate.run(lambda: ran.append(1), timeout_s=0.2)
    release.set()
    thread.join(5)
    assert ran == []                   # a timed-out job is dropped, never run later
