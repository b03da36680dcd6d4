"""Pulling answers out of completions: tags, \\boxed{}, end-of-sequence markers.

Everything here is linear-time string scanning (find/count, one brace walk), never a
backtracking regex over the whole completion, so a 1 MB completion costs milliseconds.
"""

from __future__ import annotations

from typing import Optional, Tuple

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

# Decoded completions may keep the stop token when special tokens are not skipped.
EOS_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<｜end▁of▁sentence｜>")

BOXED = "\\boxed"


def strip_trailing_eos(text: str) -> str:
    """Drop trailing whitespace and end-of-sequence markers (any number, any order)."""
    text = text.rstrip()
    while True:
        for marker in EOS_MARKERS:
            if text.endswith(marker):
                text = text[: -len(marker)].rstrip()
                break
        else:
            return text


def braced_from(text: str, start: int) -> Optional[str]:
    """Content of the `{...}` group opening at text[start], or None when unbalanced.

    Escaped braces (`\\{`, `\\}`) are content, not structure.
    """
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}`; None if there is none or it is unbalanced.

    An unbalanced last box is a malformed final answer: we do not fall back to an earlier box.
    """
    pos = text.rfind(BOXED)
    if pos < 0:
        return None
    brace = pos + len(BOXED)
    while brace < len(text) and text[brace] == " ":
        brace += 1
    return braced_from(text, brace)


def answer_block(text: str) -> Optional[str]:
    """Content of the last `<answer>...</answer>` block, or None."""
    start = text.rfind(ANSWER_OPEN)
    if start < 0:
        return None
    start += len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start)
    if end < 0:
        return None
    return text[start:end]


def r1_split(text: str) -> Optional[Tuple[str, str]]:
    """(think, answer) if `text` is `[<think>]...</think> <answer>...</answer>`, else None.

    The opening `<think>` is optional because R1-Zero prompt templates often end the assistant
    prefix with `<think>`, so the completion starts inside the think block. Every tag must occur
    exactly once (the opening think tag at most once, and only at the start), only whitespace may
    separate `</think>` from `<answer>`, and only whitespace / end-of-sequence markers may follow
    `</answer>`.
    """
    body = strip_trailing_eos(text).lstrip()
    if body.startswith(THINK_OPEN):
        body = body[len(THINK_OPEN) :]
    if THINK_OPEN in body:
        return None
    if any(body.count(tag) != 1 for tag in (THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)):
        return None
    think_end = body.find(THINK_CLOSE)
    answer_start = body.find(ANSWER_OPEN)
    if answer_start < think_end or body[think_end + len(THINK_CLOSE) : answer_start].strip():
        return None
    if not body.endswith(ANSWER_CLOSE):
        return None
    return body[:think_end], body[answer_start + len(ANSWER_OPEN) : -len(ANSWER_CLOSE)]


def last_nonempty_line(text: str) -> str:
    for line in reversed(strip_trailing_eos(text).splitlines()):
        if line.strip():
            return line.strip()
    return ""
