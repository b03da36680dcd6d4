"""Prompt loader: deterministic epochs, exact resume; the arith task generator."""

import pytest

from mindrl.data.arith import arith_problems
from mindrl.data.prompt_loader import PromptLoader


def test_arith_problems_are_correct_and_seeded():
    problems = arith_problems(50, max_operand=2, seed=3)
    for p in problems:
        a, b = p.prompt.rstrip("=").split("+")
        assert int(a) + int(b) == int(p.label) and 0 <= int(a) <= 2 and 0 <= int(b) <= 2
    assert problems == arith_problems(50, max_operand=2, seed=3)
    assert problems != arith_problems(50, max_operand=2, seed=4)


def test_each_epoch_is_a_permutation_and_epochs_differ():
    loader = PromptLoader(list(range(10)), batch_size=5, seed=1)
    e0 = loader.next_batch() + loader.next_batch()
    e1 = loader.next_batch() + loader.next_batch()
    assert sorted(e0) == list(range(10)) and sorted(e1) == list(range(10))
    assert e0 != e1


def test_resume_continues_exactly():
    straight = PromptLoader(list(range(12)), batch_size=4, seed=7)
    expected = [straight.next_batch() for _ in range(7)]
    first = PromptLoader(list(range(12)), batch_size=4, seed=7)
    got = [first.next_batch() for _ in range(3)]
    resumed = PromptLoader(list(range(12)), batch_size=4, seed=0)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.next_batch() for _ in range(4)]
    assert got == expected


def test_batch_larger_than_dataset_is_rejected_with_sizes():
    with pytest.raises(ValueError, match="batch_size=8 must be in 1..5"):
        PromptLoader(list(range(5)), batch_size=8)
