"""Tables for the countdown and arith verifiers, run in-process (no pool)."""

import json

import pytest

from mindrl.rewards import get_verifier
from mindrl.rewards.countdown import evaluate, extract_expression

TASK = json.dumps({"numbers": [3, 5, 7, 2], "target": 22})

COUNTDOWN = [
    ("<answer>(7 - 3) * 5 + 2</answer>", 1.0),
    ("<think>try</think>\n<answer>2 + 5 * (7 - 3)</answer>", 1.0),
    ("reasoning...\n(7-3)*5+2 = 22", 1.0),  # last line, "= result" dropped
    ("<answer>$\\boxed{(7-3) \\times 5 + 2}$</answer>", 1.0),
    ("<answer>(7 - 3) * 5 + 2 + 0</answer>", 0.0),  # 0 is not given
    ("<answer>(7 - 3) * 5 + 3 - 1</answer>", 0.0),  # 3 twice, 2 unused
    ("<answer>7 * 3 + 5 - 2 - 2</answer>", 0.0),  # 2 twice
    ("<answer>(7 - 3) * 5</answer>", 0.0),  # 2 unused
    ("<answer>7 + 5 + 3 + 2</answer>", 0.0),  # uses all, wrong value
    ("<answer>7 ** 2 - 5 * 3 - 2</answer>", 0.0),  # ** is not an allowed operator
    ("<answer>9**9**9</answer>", 0.0),
    ("<answer>x * 5 + 2</answer>", 0.0),  # a name
    ("<answer>abs(7 - 3) * 5 + 2</answer>", 0.0),  # a call
    ("<answer>__import__('os').system('true')</answer>", 0.0),
    ("<answer>-(3 - 7) * 5 + 2</answer>", 0.0),  # unary minus
    ("<answer>(7 - 3) * 5.0 + 2</answer>", 0.0),  # float literal
    ("<answer>(7 - 3) * 0x5 + 2</answer>", 0.0),  # non-decimal literal
    ("<answer>7 / (3 - 3) + 5 + 2</answer>", 0.0),  # division by zero
    ("<answer>" + "(" * 300 + "2" + ")" * 300 + "</answer>", 0.0),  # too long
    ("<answer>(7 - 3) * 5 + 2", 0.0),  # unclosed <answer>: the last line keeps the tag
    ("", 0.0),
]


@pytest.mark.parametrize("completion,expected", COUNTDOWN)
def test_countdown(completion, expected):
    assert get_verifier("countdown")(completion, TASK) == expected


def test_countdown_label_forms():
    answer = "<answer>10 / 4 * 2 - 3</answer>"  # exact fractions: 10/4*2 = 5
    task = {"numbers": [10, 4, 2, 3], "target": 2}
    assert get_verifier("countdown")(answer, task) == 1.0
    assert get_verifier("countdown")(answer, json.dumps(task)) == 1.0
    assert get_verifier("countdown")(answer, "", **task) == 1.0
    assert get_verifier("countdown")("<answer>3 + 3</answer>", {"numbers": [3, 3], "target": 6}) == 1.0
    with pytest.raises(ValueError):
        get_verifier("countdown")(answer, {"numbers": ["three"], "target": 2})


def test_countdown_helpers():
    assert extract_expression("<answer>\\boxed{1 × 2 ÷ 3} = 0.67</answer>") == "1 * 2 / 3"
    value, used = evaluate("(1 + 2) / 4")
    assert str(value) == "3/4" and dict(used) == {1: 1, 2: 1, 4: 1}
    assert evaluate("1 + " * 40 + "1") is None  # node limit
    assert evaluate("9999999 + 1") is None  # literal limit


ARITH = [
    ("7", "7", 1.0),
    ("7<|im_end|>", "7", 1.0),
    (" 7\n", "7", 1.0),
    ("7 because 3+4", "7", 1.0),
    ("17", "7", 0.0),
    ("70", "7", 0.0),
    ("x7", "7", 0.0),
    ("", "7", 0.0),
    ("-2", "-2", 1.0),
    ("2", "-2", 0.0),
    ("12=", "12", 1.0),
]


@pytest.mark.parametrize("completion,label,expected", ARITH)
def test_arith(completion, label, expected):
    assert get_verifier("arith")(completion, label) == expected


def test_arith_rejects_non_integer_label():
    with pytest.raises(ValueError):
        get_verifier("arith")("7", "seven")
