"""DAPO's math reward as MindSpeed-RL names it: `acc_for_dapo`, +1 correct, -1 otherwise.

MindSpeed-RL's `acc_for_dapo` is DAPO's own scoring (the DAPO-Math-17k recipe, in verl as
math_dapo): only the response's last 300 characters are read (the longest MATH answer is
far shorter), the answer is the last `Answer: ...` line (the form the DAPO prompt asks
for), and a right answer scores +1, anything else -1 (wrong, missing or unparsable). Here the
answer falls back to the last `\\boxed{}` when no `Answer:` line is there, and equality is
the project's math checker (math_verifiers.math_equal, math-verify), as `acc` uses, rather
than DAPO's string normalisation: `0.5` equals `\\frac{1}{2}` here.
"""

from __future__ import annotations

import re
from typing import Optional

from .extract import last_boxed
from .math_verifiers import math_equal
from .registry import register_verifier

TAIL_CHARS = 300                  # DAPO: the answer is looked for in the last 300 characters
ANSWER_LINE = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)


def dapo_answer(completion: str) -> Optional[str]:
    """The last `Answer: X` line's X in the response's tail, else its last `\\boxed{}`."""
    tail = completion[-TAIL_CHARS:]
    lines = ANSWER_LINE.findall(tail)
    if lines:
        return lines[-1].strip().rstrip(".").strip("$ ")
    return last_boxed(tail)


@register_verifier("acc_for_dapo")
def acc_for_dapo(completion: str, label: str, **extra) -> float:
    """+1.0 iff the answer (see `dapo_answer`) equals `label`; -1.0 otherwise."""
    answer = dapo_answer(completion)
    return 1.0 if answer is not None and math_equal(answer, label) else -1.0
