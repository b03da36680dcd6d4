"""The embedded CPU default task: the larger of two digits, "max(3,7)=" -> "7".

A rule a tiny random-init model can learn rather than recall: one ordering of the ten digits
answers all 100 pairs, while a table of the trained pairs answers none of the held-out ones.
The answer is a single digit that appears in the prompt, so a random policy samples it often
enough for GRPO to find rewards from the first steps.

Validation is held out: `max_split` sets aside pairs that training never sees, chosen so that
training still rewards every answer and shows every digit on both sides; validation accuracy
then measures whether the rule, not the table, was learned (docs/guides/demo.md#the-task).
"""

from __future__ import annotations

import random
from typing import List, Sequence, Tuple

from mindrl.data.arith_task import ArithProblem, hold_out

Pair = Tuple[int, int]
DIGITS = range(10)


def max_problem(a: int, b: int) -> ArithProblem:
    if a not in DIGITS or b not in DIGITS:
        raise ValueError(f"max({a},{b}): operands must be digits 0..9")
    return ArithProblem(prompt=f"max({a},{b})=", label=str(max(a, b)))


def max_split(holdout: int, seed: int = 0) -> Tuple[List[Pair], List[Pair]]:
    """(train pairs, held-out pairs) over the 100 digit pairs, `holdout` of them held out,
    picked in a seeded order. A pair is held out only if the rest still show every digit as
    the first and as the second operand and still have every answer 0..9 (so (0, 0), the
    only pair whose answer is 0, always trains). Raises when `holdout` cannot be met."""
    pairs = [(a, b) for a in DIGITS for b in DIGITS]
    if not 0 <= holdout < len(pairs):
        raise ValueError(f"holdout={holdout} must be in [0, {len(pairs) - 1}]; set "
                         f"prepare.holdout_pairs in that range")
    held = hold_out(pairs, holdout, seed, _covers)
    if len(held) < holdout:
        raise ValueError(f"cannot hold out {holdout} digit pairs and still train on every "
                         f"answer and operand; hold out at most {len(held)} "
                         f"(prepare.holdout_pairs)")
    return [p for p in pairs if p not in held], sorted(held)


def _covers(pairs: Sequence[Pair]) -> bool:
    values = set(DIGITS)
    return ({a for a, _ in pairs} == values and {b for _, b in pairs} == values
            and {max(p) for p in pairs} == values)


def max_problems(count: int, pairs: Sequence[Pair], seed: int = 0) -> List[ArithProblem]:
    """`count` problems drawn uniformly from `pairs` with a fixed seed."""
    if count < 0 or not pairs:
        raise ValueError(f"count={count} must be >= 0 and pairs non-empty")
    rng = random.Random(seed)
    return [max_problem(*rng.choice(pairs)) for _ in range(count)]
