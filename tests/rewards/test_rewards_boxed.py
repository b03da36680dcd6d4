"""EasyR1's math reward (boxed_format, boxed_acc): hand cases in-process, then the 0.9 / 0.1 mix
and a pathological answer through RuleReward's pool, the path the trainer scores with."""

import time

import pytest

from mindrl.rewards import RuleReward, get_verifier
from mindrl.rewards.answer_normalize import normalize_answer

TIMEOUT_S = 2.0


def think(answer, reasoning="The angles of a triangle sum to 180."):
    return f"<think>{reasoning}</think> So the answer is {answer}."


FORMAT = [
    (think("\\boxed{48}"), 1.0),
    ("\n<think>\nx\n</think>\n\\boxed{48}<|im_end|>", 1.0),  # leading space, kept eos
    ("< think >x</ think > \\boxed{48}", 1.0),  # spaced tags (Qwen2.5-VL-32B), as EasyR1 allows
    (think("\\boxed{}"), 1.0),  # an empty box is still the shape (accuracy is 0)
    ("<think>x \\boxed{1}</think> \\boxed{48}", 1.0),  # a box inside think too is fine
    ("\\boxed{48} <think>x</think>", 0.0),  # the box comes first
    ("The answer is \\boxed{48}.", 0.0),  # no think block
    ("<think>a</think><think>b</think> \\boxed{48}", 0.0),  # two think blocks
    ("<think>a <think>b</think> \\boxed{48}", 0.0),  # nested open tag
    ("<think>x \\boxed{48}</think>", 0.0),  # the box only inside think
    ("Sure. <think>x</think> \\boxed{48}", 0.0),  # text before think
    ("<think>x</think> \\boxed{48", 0.0),  # unbalanced box
    ("<think>x \\boxed{48}", 0.0),  # think never closed
    ("x</think> \\boxed{48}", 0.0),  # no opening tag
    ("<Think>x</Think> \\boxed{48}", 0.0),  # tags are case-sensitive
    ("", 0.0),
]

ACC = [
    (think("\\boxed{48}"), "48", 1.0),
    (think("\\boxed{2\\sqrt{3}}"), "2\\sqrt{3}", 1.0),
    (think("\\boxed{\\sqrt{12}}"), "2\\sqrt{3}", 1.0),
    (think("\\boxed{2 \\sqrt { 3 }}"), "2\\sqrt{3}", 1.0),  # spaces
    ("\\boxed{2√3}", "2 \\sqrt { 3 }", 1.0),
    (think("\\boxed{\\frac{40}{3}}"), "\\frac{40}{3}", 1.0),
    (think("\\boxed{40/3}"), "\\frac { 40 } { 3 }", 1.0),
    (think("\\boxed{\\dfrac{40}{3}}"), "\\frac{40}{3}", 1.0),
    (think("\\boxed{25.5}"), "25.5", 1.0),
    (think("\\boxed{\\frac{51}{2}}"), "25.5", 1.0),
    (think("\\boxed{60^\\circ}"), "60", 1.0),
    (think("\\boxed{60^{\\circ}}"), "60", 1.0),
    (think("\\boxed{60°}"), "60", 1.0),
    (think("\\boxed{60 ^ { \\circ }}"), "60", 1.0),
    (think("\\boxed{\\text{60 degrees}}"), "60", 1.0),  # math-verify alone: 0
    (think("\\boxed{60}"), "60^{\\circ}", 1.0),  # the mark on the label's side
    (think("\\boxed{48 \\text{ cm}^2}"), "48", 1.0),
    (think("\\boxed{\\text{48 cm}}"), "48", 1.0),  # math-verify alone: 0
    (think("\\boxed{48 cm^2}"), "48", 1.0),  # math-verify alone: 0
    (think("\\boxed{25.5\\,cm}"), "25.5", 1.0),  # math-verify alone: 0
    (think("\\boxed{\\$48}"), "48", 1.0),  # math-verify alone: 0
    (think("\\boxed{m \\angle ABC = 60^\\circ}"), "60", 1.0),
    ("\\boxed{48} <think>x</think>", "48", 1.0),  # format 0 does not gate accuracy
    (think("\\boxed{12}, or rather \\boxed{48}"), "48", 1.0),  # the last box counts
    # near misses: a decoration is removed, never a digit, a sign or an operator
    (think("\\boxed{12}, or rather \\boxed{48}"), "12", 0.0),
    (think("\\boxed{49}"), "48", 0.0),
    (think("\\boxed{480}"), "48", 0.0),
    (think("\\boxed{-48}"), "48", 0.0),
    (think("\\boxed{4.8 \\text{ cm}}"), "48", 0.0),
    (think("\\boxed{48x}"), "48", 0.0),  # a variable is not a unit
    (think("\\boxed{4 8}"), "48", 0.0),  # digits split by a space are not joined
    (think("\\boxed{3\\sqrt{2}}"), "2\\sqrt{3}", 0.0),
    (think("\\boxed{13.33}"), "\\frac{40}{3}", 0.0),
    (think("\\boxed{25}"), "25.5", 0.0),
    (think("\\boxed{120^\\circ}"), "60", 0.0),
    (think("\\boxed{6^\\circ}"), "60", 0.0),
    (think("\\boxed{\\sin 60^\\circ}"), "60", 0.0),  # a degree mark under trig stays
    (think("48"), "48", 0.0),  # no box
    (think("\\boxed{48"), "48", 0.0),  # unbalanced
    (think("\\boxed{}"), "48", 0.0),
]


@pytest.mark.parametrize("completion,expected", FORMAT)
def test_format(completion, expected):
    assert get_verifier("boxed_format")(completion, "48") == expected


@pytest.mark.parametrize("completion,label,expected", ACC)
def test_accuracy(completion, label, expected):
    assert get_verifier("boxed_acc")(completion, label) == expected


NORMALIZED = [
    ("60^\\circ", "60"),
    ("\\text{60 degrees}", "60"),
    ("\\text{48}\\text{ cm}", "48"),
    ("48\\text{ cm}^{2}", "48"),
    ("12 \\text{cm}\\text{ }", "12"),
    ("48 sq. units", "48"),
    ("{48}", "48"),
    ("\\sin 30^\\circ", "\\sin 30^\\circ"),  # trig reads the mark
    ("f\\circ g", "f\\circ g"),  # composition, not degrees
    ("\\text{yes}", "\\text{yes}"),  # nothing numeric would be left: graded as written
    ("m", "m"),
    ("48 m", "48"),
    ("48x", "48x"),
]


@pytest.mark.parametrize("raw,expected", NORMALIZED)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_huge_completions_stay_linear():
    """A `<` before a megabyte of spaces, a megabyte of open braces: milliseconds, not hours."""
    spaced = "<" + " " * (1 << 20) + "think>x</think>\\boxed{1}"
    braces = "<think>x</think>" + "{" * (1 << 20) + "<think>" * 1000 + "\\boxed{" * 1000
    start = time.monotonic()
    for name in ("boxed_format", "boxed_acc"):
        assert get_verifier(name)(spaced, "2") == 0.0
        assert get_verifier(name)(braces, "1") == 0.0
    assert time.monotonic() - start < 2.0


@pytest.fixture(scope="module")
def easyr1_reward():
    """The recipe's mix, built as the trainer builds it (RuleReward(names, weights, ...))."""
    with RuleReward(["boxed_acc", "boxed_format"], [0.9, 0.1],
                    verifier_timeout=TIMEOUT_S, verifier_parallel=2) as reward:
        yield reward


def test_weighted_total_and_each_half_logged(easyr1_reward):
    completions = [
        think("\\boxed{60^\\circ}"),  # both
        think("\\boxed{59}"),  # format only
        "\\boxed{60} <think>x</think>",  # accuracy only
        "60",  # neither
        think("\\boxed{\\text{60 degrees}}"),  # both
    ]
    scores, metrics = easyr1_reward.score(completions, ["60"] * 5)
    assert scores == pytest.approx([1.0, 0.1, 0.9, 0.0, 1.0])
    assert metrics["rewards/boxed_acc"] == pytest.approx(3 / 5)
    assert metrics["rewards/boxed_format"] == pytest.approx(3 / 5)
    assert metrics["rewards/score"] == pytest.approx(3.0 / 5)
    assert metrics["rewards/timeouts"] == 0 and metrics["rewards/errors"] == 0


def test_pathological_answer_times_out_scores_zero_and_is_counted(easyr1_reward):
    tower = think("\\boxed{9^{9^{9}}}")  # sympy evaluates the tower: far past any timeout
    completions = [tower, think("\\boxed{48}")]
    start = time.monotonic()
    scores, metrics = easyr1_reward.score(completions, ["48", "48"])
    elapsed = time.monotonic() - start
    assert scores == pytest.approx([0.1, 1.0])  # its format still counts; the next is scored
    assert metrics["rewards/timeouts"] == 1 and metrics["rewards/errors"] == 0
    assert metrics["rewards/boxed_acc"] == pytest.approx(0.5)
    assert elapsed < TIMEOUT_S + 5
