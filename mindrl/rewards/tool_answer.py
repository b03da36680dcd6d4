"""Verifiers of a multi-turn episode's final answer: the text after the last tool answer
(`</tool_response>`), so what the tool printed never scores for the model.

`tool_answer` is arith's prefix rule on that text (1 or 0). `tool_answer_digits` shapes it for
a tiny model learning from a sparse reward: the share of the label's characters the answer
gets right from the left, and 1 only when the answer ends where the label does (a random-init
model copying a four-digit sum from the tool's answer finds one right digit far more often
than four)."""

from __future__ import annotations

from .arith import arith
from .registry import register_verifier

RESPONSE_END = "</tool_response>"


def final_answer(completion: str) -> str:
    """The text after the last tool answer (the whole completion without one)."""
    return completion.rsplit(RESPONSE_END, 1)[-1]


@register_verifier("tool_answer")
def tool_answer(completion: str, label: str, **extra) -> float:
    return arith(final_answer(completion), label)


@register_verifier("tool_answer_digits")
def tool_answer_digits(completion: str, label: str, **extra) -> float:
    label = str(label).strip()
    if arith(final_answer(completion), label) == 1.0:
        return 1.0
    text = final_answer(completion).lstrip()
    right = 0
    while right < len(label) and right < len(text) and text[right] == label[right]:
        right += 1
    return 0.9 * right / len(label) if label else 0.0
