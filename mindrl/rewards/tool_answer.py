"""Verifiers of a multi-turn episode's final answer: the text after the last tool answer
(`</tool_response>`), so what the tool printed never scores for the model.

`tool_answer` is arith's prefix rule on that text (1 or 0). `tool_answer_digits` shapes it for
a tiny model learning from a sparse reward: after a tool answer, the share of the label's
characters the answer gets right from the left, and 1 only when the answer ends where the
label does (a random-init model copying a four-digit sum from the tool's answer finds one
right digit far more often than four); without a tool answer only an exact answer scores, so
guessing a leading digit in its head never pays.

The completion an agent run scores has the tool-answer markers only where a tool answered:
the trainer drops them from what the model sampled (trainer/agent.py scoring_texts), so a
model cannot forge a tool answer to move "the text after the last one"."""

from __future__ import annotations

from .arith import arith
from .registry import register_verifier

RESPONSE_START, RESPONSE_END = "<tool_response>", "</tool_response>"
# What a tool format inserts after the answers (models/tool_formats.py), as the scorer's
# decode leaves it: with the special tokens (<|im_end|>, <|im_start|>) or without them.
NEXT_TURN = ("<|im_end|>\n<|im_start|>assistant\n", "\nassistant\n")


def final_answer(completion: str) -> str:
    """The text after the last tool answer and the next turn's header (the whole completion
    without a tool answer); nothing when a tool answer is still open at the end (the episode's
    budget ran out inside it)."""
    if RESPONSE_START in completion.rsplit(RESPONSE_END, 1)[-1]:
        return ""
    if RESPONSE_END not in completion:
        return completion
    rest = completion.rsplit(RESPONSE_END, 1)[1]
    for header in NEXT_TURN:
        if rest.startswith(header):
            return rest[len(header):]
    return rest


@register_verifier("tool_answer")
def tool_answer(completion: str, label: str, **extra) -> float:
    return arith(final_answer(completion), label)


@register_verifier("tool_answer_digits")
def tool_answer_digits(completion: str, label: str, **extra) -> float:
    label = str(label).strip()
    if arith(final_answer(completion), label) == 1.0:
        return 1.0
    if RESPONSE_END not in completion:      # shaping rewards copying a tool's answer only
        return 0.0
    text = final_answer(completion).lstrip()
    right = 0
    while right < len(label) and right < len(text) and text[right] == label[right]:
        right += 1
    return 0.9 * right / len(label) if label else 0.0


# --- real-size agent recipes: the answer the model gives after its last tool answer, so that
# what a tool printed (a `\boxed{}` in python's output, a passage naming the answer) never
# scores for the model.

@register_verifier("tool_boxed_acc")
def tool_boxed_acc(completion: str, label: str, **extra) -> float:
    """boxed_acc on the final answer (the text after the last tool answer): 1.0 iff its last
    `\\boxed{}` equals `label` (normalised, math-verify); the ReTool recipes' accuracy."""
    from .boxed_verifiers import boxed_acc

    return boxed_acc(final_answer(completion), label)


_ARTICLES = {"a", "an", "the"}


def normalize_short_answer(text: str) -> str:
    """Open-domain QA's exact-match normalisation: lower case, punctuation dropped, the
    articles a / an / the dropped, whitespace collapsed."""
    import string

    text = "".join(" " if c in string.punctuation else c for c in text.lower())
    return " ".join(w for w in text.split() if w not in _ARTICLES)


def accepted_answers(label) -> list:
    """The label's accepted answers: a JSON list (the search_qa handler's labels) or one
    answer as text."""
    import json

    text = str(label).strip()
    if text.startswith("["):
        try:
            answers = json.loads(text)
        except ValueError:
            answers = None
        if isinstance(answers, list):
            return [str(a) for a in answers]
    return [text]


@register_verifier("tool_answer_em")
def tool_answer_em(completion: str, label: str, **extra) -> float:
    """1.0 iff the last `<answer> </answer>` block of the final answer (the text after the
    last tool answer) equals one of the label's accepted answers after normalisation
    (normalize_short_answer); the Search-R1 recipe's exact match."""
    from .extract import answer_block

    answer = answer_block(final_answer(completion))
    if answer is None:
        return 0.0
    said = normalize_short_answer(answer)
    return 1.0 if said and any(said == normalize_short_answer(a)
                               for a in accepted_answers(label)) else 0.0
