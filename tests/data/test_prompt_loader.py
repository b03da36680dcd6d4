"""Prompt loader: deterministic epochs, exact resume; the arith task generator."""

import pytest

from mindrl.data.arith_task import arith_problems, arith_split
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


def test_arith_split_holds_out_pairs_training_never_sees():
    train, held = arith_split(max_operand=3, holdout=4, seed=0)
    assert len(held) == 4 and len(train) == 12 and not set(train) & set(held)
    # training still rewards every answer and sees every digit on both sides of "+"
    assert {a + b for a, b in train} == set(range(7))
    assert {a for a, _ in train} == {b for _, b in train} == set(range(4))
    assert arith_split(3, 4, seed=0) == (train, held)
    drawn = {(q.prompt, q.label) for q in arith_problems(500, 3, seed=1, pairs=train)}
    assert drawn == {(f"{a}+{b}=", str(a + b)) for a, b in train}


def test_arith_split_refuses_what_cannot_be_held_out():
    # operands 0..1: every pair is the only one with its sum or operand position but (0,1)/(1,0)
    with pytest.raises(ValueError, match="hold out at most 1 .*prepare.holdout_pairs"):
        arith_split(max_operand=1, holdout=2)
    with pytest.raises(ValueError, match=r"holdout=9 must be in \[0, 8\]"):
        arith_split(max_operand=2, holdout=9)
    assert arith_split(max_operand=2, holdout=0) == ([(a, b) for a in range(3) for b in range(3)], [])
