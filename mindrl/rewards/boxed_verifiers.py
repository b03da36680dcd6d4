"""EasyR1's math reward as two verifiers: `boxed_format` and `boxed_acc`.

EasyR1's geometry3k recipe scores 0.9 x accuracy + 0.1 x format. Here each half is its own
registered verifier, so a recipe writes the mix as config and both halves are logged
(`rewards/boxed_acc`, `rewards/boxed_format`, and `val/...`):

    verifier_function: [boxed_acc, boxed_format]
    verifier_weight: [0.9, 0.1]

Semantics (EasyR1's examples/reward_function/math.py with mathruler's grader, read not copied):
- format: the response opens with `<think>` (leading whitespace allowed), closes it once, and a
  balanced `\\boxed{...}` follows `</think>`; text may follow the box. Spaces inside the tags
  (`< think >`, `</ think>`, as Qwen2.5-VL-32B writes them) are tolerated. Stricter than EasyR1's
  regex in one point: a second think block scores 0.
- accuracy: the last `\\boxed{}` anywhere in the response, decorations removed on both sides
  (`answer_normalize`), graded by math-verify. Format does not gate accuracy, as in EasyR1.
  math-verify is more lenient than mathruler in one way: an unreduced fraction (`\\frac{2}{4}`
  for `\\frac{1}{2}`) is equal here, as it is in value.
"""

from __future__ import annotations

import re

from .answer_normalize import normalize_answer
from .extract import THINK_CLOSE, THINK_OPEN, last_boxed
from .math_verifiers import MAX_ANSWER_CHARS, math_equal
from .registry import register_verifier

# Bounded spacing inside a tag, so a long run of spaces after a `<` cannot make it quadratic.
_SPACED_THINK_TAG = re.compile(r"<[ \t]{0,4}(/?)[ \t]{0,4}think[ \t]{0,4}>")


def _tidy_tags(text: str) -> str:
    return _SPACED_THINK_TAG.sub(lambda m: f"<{m.group(1)}think>", text)


@register_verifier("boxed_format")
def boxed_format(completion: str, label: object = None, **extra) -> float:
    """1.0 iff `<think>...</think>` (exactly one block, first) and then a `\\boxed{...}`."""
    body = _tidy_tags(completion).lstrip()  # text (an eos marker too) may follow the box
    if not body.startswith(THINK_OPEN):
        return 0.0
    if body.count(THINK_OPEN) != 1 or body.count(THINK_CLOSE) != 1:
        return 0.0
    after = body[body.find(THINK_CLOSE) + len(THINK_CLOSE) :]
    return 1.0 if last_boxed(after) is not None else 0.0


@register_verifier("boxed_acc")
def boxed_acc(completion: str, label: object, **extra) -> float:
    """1.0 iff the last `\\boxed{}` of the completion equals `label` (normalised, math-verify)."""
    answer = last_boxed(completion)
    gold = str(label)
    if answer is None or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return 0.0
    return 1.0 if math_equal(normalize_answer(answer), normalize_answer(gold)) else 0.0
