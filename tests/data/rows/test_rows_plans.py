"""Plans (data/rows/plans.py), checked by hand."""

import pytest
import torch

from mindrl.data.batch import Batch
from mindrl.data.rows import plans


def test_rows_plan_is_contiguous_slices_in_order():
    assert plans.plan_by_rows(8, 2, 2) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    with pytest.raises(ValueError, match="micro batches of 3"):
        plans.plan_by_rows(8, 2, 3)


def test_token_plan_balances_ranks_and_keeps_every_micro_batch_in_budget():
    lengths = [30, 3, 7, 25, 12, 9, 18, 2]
    plan = plans.plan_by_tokens(lengths, dp_size=2, max_tokens=32)
    assert sorted(i for rank in plan for m in rank for i in m) == list(range(8))
    assert [sum(len(m) for m in rank) for rank in plan] == [4, 4]       # equal samples
    assert len({len(rank) for rank in plan}) == 1                       # equal micro batches
    totals = [sum(lengths[i] for m in rank for i in m) for rank in plan]
    assert abs(totals[0] - totals[1]) <= 2                              # 53 vs 53 possible
    assert all(sum(lengths[i] for i in m) <= 32 for rank in plan for m in rank)
    assert all(m == sorted(m) for rank in plan for m in rank)
    # 106 tokens over 2 ranks of 32-token micro batches: 2 each is the floor.
    assert len(plan[0]) == 2


def test_token_plan_refuses_a_budget_below_the_longest_sample_naming_both():
    with pytest.raises(ValueError, match=r"max_tokens_per_micro_batch=10 .* longest sample "
                                         r"\(11 tokens"):
        plans.plan_by_tokens([3, 11], 1, 10)


def test_mini_batches_are_the_updates_split():
    assert plans.mini_batches(4, 2) == [[0, 1], [2, 3]]
    shuffled = plans.mini_batches(6, 3, shuffle=True, seed=5)
    assert sorted(sum(shuffled, [])) == list(range(6))
    assert shuffled == plans.mini_batches(6, 3, shuffle=True, seed=5)


def test_token_plan_falls_back_to_best_fit_when_balance_at_the_token_bound_overflows():
    # 6 samples over 2 ranks: 180 tokens per rank fit 2 micro batches of 100 by arithmetic, but
    # no pair of 60s and 50s does: best-fit needs 3 (one sample each on the fuller rank).
    lengths = [60, 60, 60, 50, 55, 65]
    plan = plans.plan_by_tokens(lengths, dp_size=2, max_tokens=100)
    assert [len(rank) for rank in plan] == [3, 3]
    assert all(sum(lengths[i] for i in m) <= 100 for rank in plan for m in rank)
    assert sorted(i for rank in plan for m in rank for i in m) == list(range(6))


def test_the_plan_is_by_rows_without_a_token_budget_and_by_tokens_within_one():
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1], [0, 1, 1]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    batch = Batch.of(0, prompt_ids=prompt_mask.clone(), prompt_mask=prompt_mask,
                     response_ids=response_mask.clone(), response_mask=response_mask)
    assert plans.plan(batch, 2, 1) == plans.plan_by_rows(4, 2, 1)
    assert plans.plan(batch, 2, 1, max_tokens=7) == plans.plan_by_tokens([4, 6, 2, 6], 2, 7)
