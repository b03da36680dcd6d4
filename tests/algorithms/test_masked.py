"""masked_* helpers against hand-computed values; padding may hold garbage."""

import math

import torch

from mindrl.algorithms import masked_count, masked_mean, masked_sum, masked_var, masked_whiten

F64 = torch.float64
NAN = float("nan")
INF = float("inf")

# 3x4, ragged, row 2 all masked; padding holds NaN / inf that must never leak.
VALUES = torch.tensor([[1.0, 2.0, 3.0, NAN],
                       [4.0, INF, -INF, 5.0],
                       [NAN, 7.0, 8.0, 9.0]], dtype=F64)
MASK = torch.tensor([[1, 1, 1, 0],
                     [1, 0, 0, 1],
                     [0, 0, 0, 0]])


def test_masked_sum_and_count_per_row_and_total():
    assert torch.equal(masked_sum(VALUES, MASK, dim=-1), torch.tensor([6.0, 9.0, 0.0], dtype=F64))
    assert masked_sum(VALUES, MASK).item() == 15.0
    assert torch.equal(masked_count(MASK, dim=-1), torch.tensor([3, 2, 0]))
    assert masked_count(MASK).item() == 5


def test_masked_mean_all_masked_row_is_zero_not_nan():
    assert torch.equal(masked_mean(VALUES, MASK, dim=-1), torch.tensor([2.0, 4.5, 0.0], dtype=F64))
    assert masked_mean(VALUES, MASK).item() == 3.0  # 15 / 5
    assert masked_mean(VALUES, torch.zeros_like(MASK)).item() == 0.0


def test_masked_mean_bool_and_float_masks_agree():
    assert masked_mean(VALUES, MASK.bool()).item() == 3.0
    assert masked_mean(VALUES, MASK.to(F64)).item() == 3.0


def test_masked_var_unbiased_and_biased():
    # valid values 1, 2, 3, 4, 5: mean 3, squared deviations sum 10
    assert math.isclose(masked_var(VALUES, MASK).item(), 10 / 4, abs_tol=1e-12)
    assert math.isclose(masked_var(VALUES, MASK, unbiased=False).item(), 10 / 5, abs_tol=1e-12)
    one = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert masked_var(VALUES, one).item() == 0.0  # n = 1: no spread, not NaN


def test_masked_whiten_uses_all_valid_tokens_and_zeroes_padding():
    out = masked_whiten(VALUES, MASK, eps=0.0)
    sd = math.sqrt(2.5)
    expected = torch.tensor([[-2 / sd, -1 / sd, 0.0, 0.0],
                             [1 / sd, 0.0, 0.0, 2 / sd],
                             [0.0, 0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    scaled = masked_whiten(VALUES, MASK, eps=0.0, shift_mean=False)
    torch.testing.assert_close(scaled[0, :3], torch.tensor([3 - 2 / sd, 3 - 1 / sd, 3.0], dtype=F64),
                               atol=1e-12, rtol=0)
