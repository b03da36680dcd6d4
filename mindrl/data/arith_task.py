"""The embedded CPU task: small-integer addition, "a+b=" -> "a+b".

Generated, not shipped: the default run needs no file or hub. Small operands keep the answer
space tiny so that a random-init char-level model can discover rewarded answers by sampling,
which is what lets GRPO learn it in a few hundred steps on 2 cores.

Validation is held out: `arith_split` sets aside operand pairs that training never sees, so
validation accuracy measures generalisation rather than recall of the trained table.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

Pair = Tuple[int, int]


@dataclass(frozen=True)
class ArithProblem:
    prompt: str
    label: str


def problem(a: int, b: int) -> ArithProblem:
    return ArithProblem(prompt=f"{a}+{b}=", label=str(a + b))


def arith_split(max_operand: int, holdout: int, seed: int = 0) -> Tuple[List[Pair], List[Pair]]:
    """(train pairs, held-out pairs) over 0 <= a, b <= max_operand, chosen with a fixed seed.

    Held-out pairs are picked so that training still sees every sum and every operand value
    on both sides of the "+": a held-out question never asks for an answer, or a digit in a
    position, that training never rewarded. Raises when `holdout` pairs cannot be set aside
    under that rule."""
    if max_operand < 0:
        raise ValueError(f"max_operand={max_operand} must be >= 0")
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    if not 0 <= holdout < len(pairs):
        raise ValueError(f"holdout={holdout} must be in [0, {len(pairs) - 1}] for operands "
                         f"0..{max_operand} ({len(pairs)} pairs); set prepare.holdout_pairs "
                         f"in that range")
    held = hold_out(pairs, holdout, seed, lambda rest: _covers(rest, max_operand))
    if len(held) < holdout:
        raise ValueError(f"cannot hold out {holdout} of the {len(pairs)} pairs with operands "
                         f"0..{max_operand} and still train on every sum and operand; "
                         f"hold out at most {len(held)} (prepare.holdout_pairs)")
    return [p for p in pairs if p not in held], sorted(held)


def hold_out(pairs: Sequence[Pair], holdout: int, seed: int,
             covers: Callable[[List[Pair]], bool]) -> List[Pair]:
    """Up to `holdout` of `pairs`, tried in a seeded order: each is held out only if the pairs
    left still satisfy `covers` (the caller refuses when fewer than `holdout` come back)."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    held: List[Pair] = []
    for pair in order:
        if len(held) == holdout:
            break
        if covers([p for p in pairs if p not in held and p != pair]):
            held.append(pair)
    return held


def _covers(pairs: Sequence[Pair], max_operand: int) -> bool:
    values = set(range(max_operand + 1))
    return ({a for a, _ in pairs} == values and {b for _, b in pairs} == values
            and {a + b for a, b in pairs} == set(range(2 * max_operand + 1)))


def arith_problems(count: int, max_operand: int = 2, seed: int = 0,
                   pairs: Sequence[Pair] = ()) -> List[ArithProblem]:
    """`count` problems a+b= drawn with a fixed seed: uniformly from `pairs` when given,
    else with 0 <= a, b <= max_operand."""
    if max_operand < 0 or count < 0:
        raise ValueError(f"count={count} and max_operand={max_operand} must be >= 0")
    rng = random.Random(seed)
    if pairs:
        return [problem(*rng.choice(pairs)) for _ in range(count)]
    return [problem(rng.randint(0, max_operand), rng.randint(0, max_operand))
            for _ in range(count)]


def arith_random_split(max_operand: int, holdout: int,
                       seed: int = 0) -> Tuple[List[Pair], List[Pair]]:
    """For operands too many to enumerate with coverage (the tool task, up to 999): no train
    pairs listed (training draws any pair but the held-out ones) and `holdout` distinct pairs
    drawn with a fixed seed. A tool computes the sum, so no coverage rule is needed: the held
    out questions ask nothing that training never rewarded."""
    if max_operand < 0 or holdout < 0:
        raise ValueError(f"max_operand={max_operand} and holdout={holdout} must be >= 0")
    total = (max_operand + 1) ** 2
    if holdout >= total:
        raise ValueError(f"holdout={holdout} must be below the {total} pairs of operands "
                         f"0..{max_operand}; set prepare.holdout_pairs lower")
    rng, held = random.Random(seed), set()
    while len(held) < holdout:
        held.add((rng.randint(0, max_operand), rng.randint(0, max_operand)))
    return [], sorted(held)


def arith_problems_except(count: int, max_operand: int, held: Sequence[Pair],
                          seed: int = 0) -> List[ArithProblem]:
    """`count` problems over 0 <= a, b <= max_operand, never a held-out pair."""
    rng, skip, out = random.Random(seed), set(held), []
    while len(out) < count:
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        if (a, b) not in skip:
            out.append(problem(a, b))
    return out
