"""acc_for_dapo, MindSpeed-RL's DAPO math reward: +1 right, -1 anything else (hand-made cases)."""

import pytest

from mindrl.rewards import get_verifier
from mindrl.rewards.dapo_verifiers import TAIL_CHARS, dapo_answer

CASES = [
    ("so the sum is 7.\nAnswer: 7", "7", 1.0),
    ("Answer: 41", "42", -1.0),                               # wrong: -1, not 0
    ("no final answer here", "42", -1.0),                     # missing: -1
    ("Answer: $\\frac{1}{2}$", "0.5", 1.0),                   # the maths checker, not strings
    ("Answer: 3\nthen again\nAnswer: 4", "4", 1.0),          # the last Answer line counts
    ("Answer: 3\nthen again\nAnswer: 4", "3", -1.0),
    ("thus \\boxed{12}", "12", 1.0),                          # no Answer line: the last box
    ("Answer: 5." , "5", 1.0),                                # a closing full stop is dropped
    ("Answer: 9\n" + "x" * TAIL_CHARS, "9", -1.0),            # before the last 300 chars
]


@pytest.mark.parametrize("completion, label, score", CASES)
def test_acc_for_dapo(completion, label, score):
    assert get_verifier("acc_for_dapo")(completion, label) == score


def test_the_answer_line_wins_over_a_box():
    assert dapo_answer("\\boxed{1}\nAnswer: 2") == "2"
    assert dapo_answer("nothing") is None
