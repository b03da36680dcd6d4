"""The tiny CPU demo task: prompt "3+4=", label "7"."""

from __future__ import annotations

import re

from .registry import register_verifier

_INTEGER = re.compile(r"-?[0-9]+")


@register_verifier("arith")
def arith(completion: str, label: str, **extra) -> float:
    """1.0 iff the completion starts (after optional whitespace) with the label's digits and
    the next character is not a digit ("7", "7<|im_end|>", " 7\\n" score for label 7; "17",
    "x7", "70" do not). A prefix rule, not "find the number anywhere": a tiny model must learn
    to answer first, and the score is deterministic and O(len(label))."""
    label = str(label).strip()
    if not _INTEGER.fullmatch(label):
        raise ValueError(f"arith label must be an integer, got {label!r}")
    text = completion.lstrip()
    if not text.startswith(label):
        return 0.0
    return 0.0 if text[len(label) : len(label) + 1] in tuple("0123456789") else 1.0
