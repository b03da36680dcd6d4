"""How a [B, R] per-token loss becomes one scalar (registry LOSS_AGGREGATORS).

The choice changes what a long response weighs: token-mean (DAPO) gives every valid
token the same weight, seq-mean-token-mean (original GRPO) gives every sequence the same
weight, seq-mean-token-sum (Dr.GRPO-style, no length normalisation) lets long sequences
weigh more. Sequences with no valid token are left out of the sequence means, and an
all-masked batch gives 0.
"""

from __future__ import annotations

import torch

from mindrl.algorithms.masked import masked_count, masked_mean, masked_sum
from mindrl.algorithms.registry import Registry

LOSS_AGGREGATORS = Registry("loss aggregation mode")


@LOSS_AGGREGATORS.register("token-mean")
def token_mean(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over all valid tokens / number of valid tokens."""
    return masked_mean(loss_mat, mask)


def _mean_over_nonempty_rows(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    nonempty = masked_count(mask, dim=-1) > 0
    return masked_mean(per_row, nonempty)


@LOSS_AGGREGATORS.register("seq-mean-token-mean")
def seq_mean_token_mean(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's valid tokens, then mean over non-empty sequences."""
    return _mean_over_nonempty_rows(masked_mean(loss_mat, mask, dim=-1), mask)


@LOSS_AGGREGATORS.register("seq-mean-token-sum")
def seq_mean_token_sum(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over each sequence's valid tokens, then mean over non-empty sequences."""
    return _mean_over_nonempty_rows(masked_sum(loss_mat, mask, dim=-1), mask)


def get_loss_aggregator(name: str):
    return LOSS_AGGREGATORS.lookup(name)


def aggregate_loss(loss_mat: torch.Tensor, mask: torch.Tensor,
                   agg_mode: str = "token-mean") -> torch.Tensor:
    """Reduce a [B, R] per-token loss to a scalar with the named mode."""
    return get_loss_aggregator(agg_mode)(loss_mat, mask)
