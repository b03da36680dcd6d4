"""The max_digit verifier: exactly the label's digit first, nothing else scores."""

import pytest

from mindrl.rewards import get_verifier

CASES = [
    ("7", "7", 1.0),
    ("7<|im_end|>", "7", 1.0),
    (" 7\n", "7", 1.0),
    ("7+", "7", 1.0),
    ("0", "0", 1.0),
    ("77", "7", 0.0),     # a longer number is another answer
    ("70", "7", 0.0),
    ("x7", "7", 0.0),     # the answer must come first
    ("3", "7", 0.0),
    ("", "7", 0.0),
    ("-7", "7", 0.0),
]


@pytest.mark.parametrize("completion,label,expected", CASES)
def test_max_digit(completion, label, expected):
    assert get_verifier("max_digit")(completion, label) == expected


@pytest.mark.parametrize("label", ["10", "", "a", "-1", "7.0"])
def test_max_digit_refuses_labels_that_are_not_one_digit(label):
    with pytest.raises(ValueError, match="one digit"):
        get_verifier("max_digit")("7", label)
