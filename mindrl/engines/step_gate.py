"""Work on a vLLM engine between its decode steps, from another thread.

vLLM is not thread-safe, yet an in-flight weight sync (rl_config.inflight_sync) must reach an
engine while a generate runs: the sync's calls arrive on another thread (a Ray engine's "sync"
concurrency group, rollout/engine_group.py) and may not touch vLLM while a step runs. A
`StepGate` serialises them: while a generate runs, work waits in a queue that the generate's
loop runs after each engine step (`between_steps`) and before it returns; while none runs,
work runs at once in the caller's thread, and a generate that begins meanwhile waits for it.
So every piece of work sees vLLM between two steps, never inside one.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, List, Optional


class GateTimeout(TimeoutError):
    """A generate did not reach the end of an engine step within the wait's deadline."""


class _Job:
    def __init__(self, work: Callable[[], Any]):
        self.work, self.done = work, False
        self.result: Any = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:       # handed to the waiting caller
            self.error = exc
        self.done = True


class StepGate:
    def __init__(self):
        self._cv = threading.Condition()
        self._queue: List[_Job] = []
        self._generating = 0
        self.steps = 0                     # engine steps ended under `generating`

    def run(self, work: Callable[[], Any], timeout_s: Optional[float] = None) -> Any:
        """`work()` between two engine steps (at once when no generate runs); its result, or
        its exception. GateTimeout when a running generate does not end a step within
        `timeout_s` (the job is then dropped, never run)."""
        job = _Job(work)
        with self._cv:
            if not self._generating:       # holding the lock: no generate can begin
                job.run()
            else:
                self._queue.append(job)
                if not self._cv.wait_for(lambda: job.done, timeout_s):
                    self._queue.remove(job)
                    raise GateTimeout(f"the engine's generate ended no decode step within "
                                      f"{timeout_s:.0f} s")
        if job.error is not None:
            raise job.error
        return job.result

    @contextmanager
    def generating(self):
        """Around a generate's step loop: queued work waits for `between_steps`, and what is
        still queued when the loop ends runs before the generate returns."""
        with self._cv:
            self._generating += 1
        try:
            yield self
        finally:
            with self._cv:
                self._drain()
                self._generating -= 1

    def between_steps(self) -> None:
        """Run the queued work (called by the generate's loop after each engine step)."""
        self.steps += 1
        if self._queue:                    # read without the lock: a miss waits one step
            with self._cv:
                self._drain()

    def _drain(self) -> None:
        while self._queue:
            self._queue.pop(0).run()
        self._cv.notify_all()
