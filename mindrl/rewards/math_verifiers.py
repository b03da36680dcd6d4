"""Math-equivalence rewards backed by math-verify.

math-verify's own timeouts use signal.alarm (main thread only), so they are disabled here
(`parsing_timeout=None`, `timeout_seconds=None`); the process pool enforces the time limit by
killing the worker instead.
"""

from __future__ import annotations

from functools import lru_cache
from typing import List

from .extract import answer_block, last_boxed, r1_split
from .registry import register_verifier

# Longer "answers" are never a correct final answer in practice, and sympy on them (a 10^6
# digit integer, 2000 nested fractions) can take unbounded time: reject them up front rather
# than spend a worker timeout and respawn.
MAX_ANSWER_CHARS = 1000


def _parse(text: str) -> List[object]:
    from math_verify import parse

    # A bare answer ("\frac{1}{2}", "x=3") is LaTeX math without delimiters; wrapping it in $..$
    # makes math-verify parse it as such. Free text (no parse when wrapped) is tried as-is.
    if "$" not in text and "\\boxed" not in text:
        parsed = parse(f"${text}$", parsing_timeout=None)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=None)


@lru_cache(maxsize=4096)
def _parse_label(label: str) -> tuple:
    """Labels repeat across a GRPO group (n samples per prompt): parse each once per worker."""
    return tuple(_parse(label.strip()))


def math_equal(answer: str, label: str) -> bool:
    """Whether the extracted `answer` is mathematically equal to the reference `label`."""
    from math_verify import verify

    answer = answer.strip()
    if not answer or len(answer) > MAX_ANSWER_CHARS or len(str(label)) > MAX_ANSWER_CHARS:
        return False
    gold = list(_parse_label(str(label)))
    if not gold:
        return False
    pred = _parse(answer)
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


@register_verifier("acc")
def acc(completion: str, label: str, **extra) -> float:
    """1.0 iff the last `\\boxed{}` (else the last `<answer>` content) equals `label`."""
    answer = last_boxed(completion)
    if answer is None:
        answer = answer_block(completion)
    if answer is None:
        return 0.0
    return 1.0 if math_equal(answer, label) else 0.0


@register_verifier("base_acc")
def base_acc(completion: str, label: str, **extra) -> float:
    """1.0 iff R1 format (see `extract.r1_split`) with a `\\boxed{}` in the answer equal to `label`.

    The opening `<think>` is optional: R1-Zero templates often end the prompt with it.
    """
    parts = r1_split(completion)
    if parts is None:
        return 0.0
    boxed = last_boxed(parts[1])
    if boxed is None:
        return 0.0
    return 1.0 if math_equal(boxed, label) else 0.0
