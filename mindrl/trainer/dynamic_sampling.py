"""DAPO dynamic sampling: keep only prompt groups whose samples disagree on the reward.

A group whose n samples all score the same has zero group-normalised advantage everywhere:
it costs a full update and teaches nothing. Generation continues with fresh prompts until the
step has a full batch of informative groups (or the round limit is reached; then the batch
is topped up with uninformative groups, which only contribute their KL/entropy terms).
"""

from __future__ import annotations

from typing import Dict, List, Sequence


def informative_groups(scores: Sequence[float], prompt_index: Sequence[int]) -> List[int]:
    """Prompt indices (in first-seen order) whose samples do not all share one score."""
    by_prompt: Dict[int, List[float]] = {}
    for score, index in zip(scores, prompt_index):
        by_prompt.setdefault(index, []).append(score)
    return [i for i, values in by_prompt.items() if max(values) != min(values)]


def select_groups(informative: Sequence[int], uninformative: Sequence[int],
                  wanted: int) -> List[int]:
    """`wanted` group ids: informative first, topped up with uninformative ones if short."""
    chosen = list(informative[:wanted])
    chosen += list(uninformative[:wanted - len(chosen)])
    return chosen
