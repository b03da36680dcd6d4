"""Each loss aggregation mode on 3x4 ragged masks, against hand-computed values."""

import pytest
import torch

from mindrl.algorithms import LOSS_AGGREGATORS, aggregate_loss

F64 = torch.float64
LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0],
                     [5.0, 6.0, 7.0, 8.0],
                     [9.0, 10.0, 11.0, 12.0]], dtype=F64)
RAGGED = torch.tensor([[1, 1, 1, 1],
                       [1, 1, 0, 0],
                       [0, 1, 0, 0]])
WITH_EMPTY_ROW = torch.tensor([[1, 1, 1, 0],
                               [1, 0, 0, 0],
                               [0, 0, 0, 0]])

# rows (valid tokens):   RAGGED: [1,2,3,4] sum 10 | [5,6] sum 11 | [10] sum 10
#                WITH_EMPTY_ROW: [1,2,3]   sum 6  | [5]   sum 5  | (none)
CASES = [
    ("token-mean", RAGGED, 31 / 7),                     # 31 over 7 tokens
    ("seq-mean-token-mean", RAGGED, (2.5 + 5.5 + 10) / 3),  # = 6
    ("seq-mean-token-sum", RAGGED, 31 / 3),
    ("token-mean", WITH_EMPTY_ROW, 11 / 4),
    ("seq-mean-token-mean", WITH_EMPTY_ROW, (2.0 + 5.0) / 2),  # empty row left out
    ("seq-mean-token-sum", WITH_EMPTY_ROW, (6.0 + 5.0) / 2),
]


@pytest.mark.parametrize("mode,mask,expected", CASES)
def test_aggregation_modes_on_ragged_masks(mode, mask, expected):
    assert aggregate_loss(LOSS, mask, mode).item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATORS))
def test_all_masked_batch_gives_zero_and_finite_gradient(mode):
    loss_mat = LOSS.clone().requires_grad_(True)
    loss = aggregate_loss(loss_mat, torch.zeros(3, 4), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(loss_mat.grad, torch.zeros(3, 4, dtype=F64))


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATORS))
def test_garbage_in_padding_does_not_leak(mode):
    dirty = LOSS.clone()
    dirty[WITH_EMPTY_ROW == 0] = float("nan")
    assert aggregate_loss(dirty, WITH_EMPTY_ROW, mode).item() == aggregate_loss(
        LOSS, WITH_EMPTY_ROW, mode).item()


def test_token_mean_gradient_weights_every_token_equally():
    loss_mat = LOSS.clone().requires_grad_(True)
    aggregate_loss(loss_mat, RAGGED, "token-mean").backward()
    expected = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 0, 0]], dtype=F64) / 7
    torch.testing.assert_close(loss_mat.grad, expected, atol=1e-12, rtol=0)


def test_unknown_mode_lists_known_modes():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        aggregate_loss(LOSS, RAGGED, "seq-sum")
