"""The episode seam: how one prompt becomes one response by one or more engine calls.

An episode is asked after every engine call that ended on its own (EOS or a stop id) what
comes next: nothing (the episode is done) or ids to insert before the engine samples again (a
tool's answer in the chat template's layout, an environment's observation). It is asked for
every sample whose turn ended in the same chunk at once, so a tool pool gets one batch. Token in, token
out: the ids the engine sampled carry forward as they are, the inserted ids are appended as
given, and the next call's prompt is the previous prompt + its output + the inserted ids (the
rollout checks the engine ran exactly that, rollout/partial.py). Nothing here decodes and
re-encodes what was sampled.

Every response token has a kind (SAMPLED by the engine, or INSERTED), the turn it belongs to
(0, 1, ...: a turn is one engine call's tokens and what was inserted after it) and the policy
version of the call that sampled it (inserted tokens: the version of the turn that called).
The rollout writes them as `loss_mask` (SAMPLED: the trained tokens), `token_turn` and
`token_policy_version` (data/batch.FIELDS). A cut a weight sync or a chunk makes
(rl_config.partial_rollout_tokens) is a turn boundary the engine did not ask for: the sample
continues in the same turn, and the episode is not asked.

`SingleTurn` (one call, nothing between) is the default and today's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Protocol, Sequence

SAMPLED, INSERTED = 1, 0


@dataclass(frozen=True)
class TurnEnd:
    """A sample whose engine call ended on its own: its prompt, its response so far (every
    kind), each token's kind, the turn that just ended (0 first) and the sample's index in
    the submitted batch (prompt-major, whatever engine runs it: what an episode keys a
    sample's own state by)."""

    prompt: Sequence[int]
    response: Sequence[int]
    kinds: Sequence[int]
    turn: int
    sample: int = 0

    def last_turn(self) -> List[int]:
        """The ids the engine sampled in the turn that just ended (the trailing SAMPLED run):
        what a tool format parses for calls."""
        start = len(self.kinds)
        while start > 0 and self.kinds[start - 1] == SAMPLED:
            start -= 1
        return list(self.response[start:])


class Episode(Protocol):
    """What runs between engine calls. `between` answers, per ended turn, the ids to insert
    before the next call, or None: that episode is done. `multi_turn` False: never asked.
    An episode may also have `batch_fields(samples)`: per-sample fields (e.g. an
    environment's reward) that the rollout adds to the batch once every sample is done, in
    the batch's order (TurnEnd.sample)."""

    multi_turn: bool

    def between(self, turns: Sequence[TurnEnd]) -> List[Optional[List[int]]]:
        ...


class SingleTurn:
    """One engine call, nothing between: every response token is sampled, in turn 0."""

    multi_turn = False

    def between(self, turns) -> List[None]:
        return [None] * len(turns)


def trained_ids(response: Sequence[int], kinds: Sequence[int]) -> List[int]:
    """The ids the objective trains on: exactly those the engine sampled (the invariant a
    merged episode must hold)."""
    return [t for t, k in zip(response, kinds) if k == SAMPLED]
