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


class Terminated(BaseException):
    """The driver got SIGTERM (a scheduler's cancel or preemption): like Ctrl-C, it unwinds
    the loop (a BaseException, so no `except Exception` takes it) and Ray is shut down; the
    last complete checkpoint stays loadable."""


class PhaseTimeout(RuntimeError):
    """A phase's members did not all answer within rl_config.phase_timeout_s; `who` are the
    ones still running it."""

    def __init__(self, message: str, what: str, who: Sequence[str], timeout_s: float):
        super().__init__(message)
        self.what, self.who, self.timeout_s = what, list(who), timeout_s


def ray_result(ref, who: str, what: str, died: type = WorkerDied, failed: type = RuntimeError):
    """`ray.get(ref)` of the member labelled `who` running `what`, its failure translated once
    for every group (ranks, rollout engines, the weight fan-out): a dead member raises `died`
    naming it; a death its task saw (an engine a rank fed) passes through with who saw it; any
    other error raises `failed` naming the member and the phase."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        raise died(f"{who} died during {what}: {str(e).splitlines()[0]}", what, [who]) from None
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, WorkerDied):
            raise type(cause)(f"{cause} (seen by {who} during {what})", cause.what or what,
                              cause.who) from None
        raise failed(f"{who}: {what} failed: {cause if cause is not None else e}") from None
