"""Truncated importance-sampling weights against hand-computed values."""

import math

import pytest
import torch

from mindrl.algorithms import truncated_is_weight

F64 = torch.float64


def test_truncated_is_weight_table():
    # old - rollout per token, and the weight min(exp(.), 2)
    #   0 -> 1 | log 1.5 -> 1.5 | log 3 -> 2 (capped) | -log 2 -> 0.5 | 50 -> 2 | padding -> 0
    old = torch.tensor([[0.0, math.log(1.5), math.log(3.0), -math.log(2.0)],
                        [50.0, 0.0, float("nan"), 0.0],
                        [0.0, 0.0, 0.0, 0.0]], dtype=F64, requires_grad=True)
    rollout = torch.zeros(3, 4, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    weights = truncated_is_weight(old, rollout, mask, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.5, 2.0, 0.5],
                                                      [2.0, 0.0, 0.0, 0.0],
                                                      [0.0, 0.0, 0.0, 0.0]], dtype=F64),
                               atol=1e-12, rtol=0)
    assert not weights.requires_grad


def test_cap_must_be_positive():
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weight(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cap=0.0)
