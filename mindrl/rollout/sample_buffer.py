"""Batches generated ahead of the steps that train on them, and the admission control that
paces their generation (asynchronous GRPO, trainer/async_source.py).

Step t trains from the actor's weights after t - 1 updates. A batch generated on weights
version v (the engines' `policy_version` at submission) is therefore t - 1 - v versions stale
when step t trains on it. `SampleBuffer` admits the batch for step t only while
t - 1 - v <= max_staleness, so no sample trained on is older than the bound; nothing is
discarded for age: a batch that would exceed the bound is simply not generated yet (its
prompts wait in the loader), and one admitted is always trained on. Pure Python: no Ray, no
engine, so the pacing is tested on its own (tests/rollout/test_sample_buffer.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass
class Admitted:
    """One batch in the buffer: what generates it (a RolloutHandle, or anything the caller
    keeps), the weights version it was submitted on, and what the caller needs to train on it
    or resume before it (e.g. the loader's state before its prompts were drawn)."""

    step: int
    version: int
    handle: Any
    extra: Optional[Dict[str, Any]] = None


class SampleBuffer:
    """Steps start + 1 .. last_step, each admitted once, in order, and taken once, in order."""

    def __init__(self, max_staleness: int, start: int, last_step: int):
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) \
                or max_staleness < 0:
            raise ValueError(f"max_staleness must be an integer >= 0, got {max_staleness!r}")
        self.bound, self.last_step = max_staleness, last_step
        self.next_step = start + 1        # the first step not yet admitted
        self.next_take = start + 1        # the first step not yet trained on
        self._held: Dict[int, Admitted] = {}

    @staticmethod
    def staleness(step: int, version: int) -> int:
        """How many versions step `step`'s update weights are ahead of `version`."""
        return step - 1 - version

    def admissible(self, version: int) -> List[int]:
        """The steps whose batches may be submitted now, on weights `version`, in order."""
        steps, t = [], self.next_step
        while t <= self.last_step and self.staleness(t, version) <= self.bound:
            steps.append(t)
            t += 1
        return steps

    def admit(self, step: int, version: int, handle: Any,
              extra: Optional[Dict[str, Any]] = None) -> Admitted:
        """Hold step's batch, submitted on `version`; refused out of order or past the bound."""
        if step != self.next_step:
            raise ValueError(f"step {step} admitted out of order: the next is {self.next_step}")
        if step > self.last_step:
            raise ValueError(f"step {step} is after the run's last step {self.last_step}")
        if self.staleness(step, version) > self.bound:
            raise ValueError(f"step {step} on weights version {version} would be "
                             f"{self.staleness(step, version)} versions stale (bound "
                             f"{self.bound})")
        entry = self._held[step] = Admitted(step, version, handle, extra)
        self.next_step += 1
        return entry

    def take(self, step: int) -> Admitted:
        """Step's batch, leaving the buffer; every step is taken once, in order."""
        if step != self.next_take or step not in self._held:
            raise KeyError(f"step {step} is not the next batch held (next {self.next_take}, "
                           f"held {sorted(self._held)})")
        self.next_take += 1
        return self._held.pop(step)

    def held(self) -> List[Admitted]:
        """The batches admitted and not yet taken, in step order."""
        return [self._held[s] for s in sorted(self._held)]
