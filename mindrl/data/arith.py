"""The embedded CPU task: small-integer addition, "a+b=" -> "a+b".

Generated, not shipped: the default run needs no file or hub. Small operands keep the answer
space tiny so that a random-init char-level model can discover rewarded answers by sampling,
which is what lets GRPO learn it in a few hundred steps on 2 cores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List


@dataclass(frozen=True)
class ArithProblem:
    prompt: str
    label: str


def arith_problems(count: int, max_operand: int = 2, seed: int = 0) -> List[ArithProblem]:
    """`count` problems a+b= with 0 <= a, b <= max_operand, drawn with a fixed seed."""
    if max_operand < 0 or count < 0:
        raise ValueError(f"count={count} and max_operand={max_operand} must be >= 0")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        out.append(ArithProblem(prompt=f"{a}+{b}=", label=str(a + b)))
    return out
