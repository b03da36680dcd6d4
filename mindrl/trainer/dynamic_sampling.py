"""DAPO dynamic sampling: keep only prompt groups whose samples disagree on the reward.

A group whose n samples all score the same has zero group-normalised advantage everywhere:
it costs a full update and teaches nothing. Generation continues with fresh prompts until the
step has a full batch of informative groups (or the round limit is reached; then the batch
is topped up with uninformative groups, which only contribute their KL/entropy terms).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

from mindrl.data.batch import Batch


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


def sample_informative(batch: Batch, metrics: Dict[str, float], wanted: int, max_rounds: int,
                       more: Callable[[int], Tuple[Batch, Dict[str, float]]]
                       ) -> Tuple[Batch, Dict[str, float]]:
    """`wanted` prompt groups, informative ones first: `batch` (scored), then `more(round)`
    (a fresh scored batch) until enough groups disagree or `max_rounds` batches were drawn.
    Group ids are renumbered 0.. in the result."""
    pools: Tuple[list, list] = ([], [])   # (batch, group id): informative, not
    rounds, generated = 0, []
    while True:
        rounds += 1
        generated += batch["scores"].tolist()
        keep = set(informative_groups(batch["scores"].tolist(), batch["group_id"].tolist()))
        for g in batch.group_ids:
            pools[0 if g in keep else 1].append((batch, g))
        if len(pools[0]) >= wanted or rounds >= max_rounds:
            break
        batch, _ = more(rounds)
    chosen = select_groups(pools[0], pools[1], wanted)
    metrics = {**metrics, "dynamic_sampling/rounds": float(rounds),
               "dynamic_sampling/informative_groups": float(len(pools[0])),
               "dynamic_sampling/raw_score_mean": sum(generated) / len(generated)}
    return Batch.concat([b.select_groups([g]) for b, g in chosen], renumber_groups=True), metrics
