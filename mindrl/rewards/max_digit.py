"""The embedded default's verifier: prompt "max(3,7)=", label "7" (mindrl/data/max_task.py)."""

from __future__ import annotations

from .arith import arith
from .registry import register_verifier


@register_verifier("max_digit")
def max_digit(completion: str, label: str, **extra) -> float:
    """1.0 iff the completion answers with exactly the label's digit first: "7", " 7<|im_end|>"
    score for label 7; "77", "70", "x7", "" do not. The label must be one digit (the task's
    answers are 0..9), so a mislabelled row fails loudly instead of scoring 0 forever."""
    label = str(label).strip()
    if len(label) != 1 or label not in "0123456789":
        raise ValueError(f"max_digit label must be one digit 0..9, got {label!r}")
    return arith(completion, label)
