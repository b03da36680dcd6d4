"""Failures of the run's processes, raised by whichever layer notices them first.

Kept below every layer so that the weight sync (inside an actor rank) and the driver raise
the same types. Each names the phase (`what`: the method every member was running) and who
failed (`who`: labels such as "actor rank 1" or "rollout engine 0 (actor device 0)", the
labels the groups' `members()` use), so the driver's failure report can say where they ran.
cli/train_grpo.py turns a death into exit code 3 and a passed deadline into exit code 4.
"""

from typing import Optional, Sequence


class WorkerDied(RuntimeError):
    """A process the run needs (a rank of a role, a rollout engine) is gone."""

    def __init__(self, message: str, what: Optional[str] = None, who: Sequence[str] = ()):
        super().__init__(message)
        self.what, self.who = what, list(who)


class EngineDied(WorkerDied):
    """A rollout engine is gone; the message names it."""


class WeightSyncError(RuntimeError):
    """vLLM's weights can no longer be trusted (failed or wrong load): restart the engine.
    Raised by the engines and by the weight sync that feeds them."""


class PhaseTimeout(RuntimeError):
    """A phase's members did not all answer within rl_config.phase_timeout_s; `who` are the
    ones still running it."""

    def __init__(self, message: str, what: str, who: Sequence[str], timeout_s: float):
        super().__init__(message)
        self.what, self.who, self.timeout_s = what, list(who), timeout_s
