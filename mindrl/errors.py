"""Failures of the run's processes, raised by whichever layer notices them first.

Kept below every layer so that the weight sync (inside an actor rank) and the driver raise
the same types; cli/train_grpo.py turns any of them into exit code 3 with its message.
"""


class WorkerDied(RuntimeError):
    """A process the run needs (a rank of a role, a rollout engine) is gone."""


class EngineDied(WorkerDied):
    """A rollout engine is gone; the message names it."""
