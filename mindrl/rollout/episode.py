"""The episode seam: how one prompt becomes one response by one or more engine calls.

An episode is asked after every engine call that ended on its own (EOS or a stop id) what
comes next: nothing (the episode is done) or ids to insert before the engine samples again (a
tool's answer in the chat template's layout, an environment's observation). Token in, token
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

from typing import List, Optional, Protocol, Sequence

SAMPLED, INSERTED = 1, 0


class Episode(Protocol):
    """What runs between engine calls. `between` sees the sample so far (its prompt and
    response ids, their kinds and turns) and answers the ids to insert, or None: done."""

    def between(self, prompt: Sequence[int], response: Sequence[int],
                kinds: Sequence[int], turn: int) -> Optional[List[int]]:
        ...


class SingleTurn:
    """One engine call, nothing between: every response token is sampled, in turn 0."""

    def between(self, prompt, response, kinds, turn) -> None:
        return None


def trained_ids(response: Sequence[int], kinds: Sequence[int]) -> List[int]:
    """The ids the objective trains on: exactly those the engine sampled (the invariant a
    merged episode must hold)."""
    return [t for t, k in zip(response, kinds) if k == SAMPLED]
