"""Format rewards: is the completion shaped like an R1 think/answer response?"""

from __future__ import annotations

import re

from .extract import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    TAGS,
    THINK_CLOSE,
    THINK_OPEN,
    strip_trailing_eos,
)
from .registry import register_verifier

# Anchored and with every tag known to occur exactly once, the greedy groups can backtrack to
# a single candidate each: linear time.
_STRICT = re.compile(r"<think>\n(.*)\n</think>\n<answer>\n(.*)\n</answer>", re.DOTALL)


@register_verifier("strict_format")
def strict_format(completion: str, label: object = None, **extra) -> float:
    """1.0 iff exactly `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`.

    Nothing may precede `<think>` (so a prompt that pre-fills `<think>` never earns it: use
    `format` there); trailing whitespace and end-of-sequence markers are allowed.
    """
    body = strip_trailing_eos(completion)
    if any(body.count(tag) != 1 for tag in TAGS):
        return 0.0
    return 1.0 if _STRICT.fullmatch(body) else 0.0


@register_verifier("format")
def loose_format(completion: str, label: object = None, **extra) -> float:
    """1.0 iff a think block then an answer block appear, in that order, each tag once.

    Text around and between the blocks is allowed; the opening `<think>` is optional (prompt
    templates may pre-fill it), but if present it must come before `</think>`.
    """
    counts = {tag: completion.count(tag) for tag in TAGS}
    if counts[THINK_OPEN] > 1 or any(counts[t] != 1 for t in (THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)):
        return 0.0
    positions = [completion.find(t) for t in (THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)]
    if counts[THINK_OPEN]:
        positions.insert(0, completion.find(THINK_OPEN))
    return 1.0 if positions == sorted(positions) else 0.0
