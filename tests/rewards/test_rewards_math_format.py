"""Tables for the math and format verifiers, run in-process (no pool)."""

import pytest

from mindrl.rewards import get_verifier
from mindrl.rewards.extract import answer_block, last_boxed, r1_split, strip_trailing_eos


def r1(think, answer):
    return f"<think>\n{think}\n</think>\n<answer>\n{answer}\n</answer>"


GOOD = r1("1/2 is a half", "The answer is \\boxed{\\frac{1}{2}}")

BASE_ACC = [
    (GOOD, "0.5", 1.0),
    (GOOD, "\\frac{1}{2}", 1.0),
    (GOOD + "<|im_end|>", "1/2", 1.0),  # trailing eos
    (GOOD[len("<think>") :], "0.5", 1.0),  # prompt pre-filled "<think>"
    ("<think>a</think> <answer>\\boxed{3}</answer>\n", "3", 1.0),  # R1 order, loose spacing
    (r1("x", "\\boxed{x=3}"), "$x=3$", 1.0),
    (GOOD, "0.6", 0.0),  # wrong value
    (r1("x", "1/2"), "0.5", 0.0),  # no \boxed in answer
    ("<think>x</think>\\boxed{1/2}", "0.5", 0.0),  # no answer block
    ("<answer>\\boxed{1/2}</answer><think>x</think>", "0.5", 0.0),  # wrong order
    (GOOD + GOOD, "0.5", 0.0),  # tags twice
    (GOOD + " trailing words", "0.5", 0.0),  # text after </answer>
    ("<think>x</think> so \\boxed{1/2} <answer>\\boxed{1/2}</answer>", "0.5", 0.0),  # text between
    (r1("x", "\\boxed{{{{"), "0.5", 0.0),  # unbalanced
    ("", "0.5", 0.0),
]

ACC = [
    ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("so the answer is \\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("first \\boxed{3} then \\boxed{4}", "4", 1.0),  # the last box counts
    ("first \\boxed{3} then \\boxed{4}", "3", 0.0),
    ("<answer>1/2</answer>", "0.5", 1.0),  # no box: answer content
    ("<answer>x = 3</answer>", "$x=3$", 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", 1.0),
    ("\\boxed{-7}", "-7", 1.0),
    ("\\boxed{7}", "-7", 0.0),
    ("the answer is 1/2", "0.5", 0.0),  # neither box nor answer block
    ("\\boxed{{{{", "1", 0.0),
    ("\\boxed{}", "1", 0.0),
    ("\\boxed{" + "9" * 5000 + "}", "1", 0.0),  # over MAX_ANSWER_CHARS
]

STRICT = [
    (r1("a", "b"), 1.0),
    (r1("a\n\nb", "c\nd") + "\n<|im_end|>", 1.0),
    (r1("a", "b") + "  \n", 1.0),
    ("<think>\na\n</think>\n\n<answer>\nb\n</answer>", 0.0),  # blank line between blocks
    ("<think>a</think>\n<answer>\nb\n</answer>", 0.0),  # no newline after <think>
    (" " + r1("a", "b"), 0.0),  # leading text
    ("\na\n</think>\n<answer>\nb\n</answer>", 0.0),  # pre-filled <think>: use `format`
    (r1("a", "b") + "x", 0.0),
    (r1("a <answer>", "b"), 0.0),  # extra tag
    ("", 0.0),
]

LOOSE = [
    (r1("a", "b"), 1.0),
    ("preamble <think>a</think> middle <answer>b</answer> tail", 1.0),
    ("a</think><answer>b</answer>", 1.0),  # pre-filled <think>
    ("<answer>b</answer><think>a</think>", 0.0),
    ("<think>a</think><answer>b", 0.0),
    ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0),
    ("</think><think>a<answer>b</answer>", 0.0),
    ("just text", 0.0),
]


@pytest.mark.parametrize("completion,label,expected", BASE_ACC)
def test_base_acc(completion, label, expected):
    assert get_verifier("base_acc")(completion, label) == expected


@pytest.mark.parametrize("completion,label,expected", ACC)
def test_acc(completion, label, expected):
    assert get_verifier("acc")(completion, label) == expected


@pytest.mark.parametrize("completion,expected", STRICT)
def test_strict_format(completion, expected):
    assert get_verifier("strict_format")(completion, "") == expected


@pytest.mark.parametrize("completion,expected", LOOSE)
def test_format(completion, expected):
    assert get_verifier("format")(completion, "") == expected


def test_extraction_helpers():
    assert last_boxed("\\boxed{a} \\boxed {\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\{1\\}}") == "\\{1\\}"
    assert last_boxed("\\boxed{a}{") == "a"
    assert last_boxed("\\boxed{") is None and last_boxed("none") is None
    assert answer_block("<answer>a</answer><answer>b</answer>") == "b"
    assert answer_block("<answer>a") is None
    assert strip_trailing_eos("x</s> <|im_end|>\n") == "x"
    assert r1_split("t</think><answer>a</answer>") == ("t", "a")


def test_huge_inputs_are_linear_time():
    import time

    big = "{" * (1 << 20) + "<think>" * 1000 + "\\boxed{" * 1000
    start = time.monotonic()
    for name in ("base_acc", "format", "strict_format"):
        assert get_verifier(name)(big, "1") == 0.0
    assert last_boxed(big) is None
    assert time.monotonic() - start < 2.0
