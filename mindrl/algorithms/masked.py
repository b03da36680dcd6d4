"""Reductions that only see tokens where the mask is 1.

Padding may hold anything (garbage logprobs, -inf, NaN from an engine), so values are
selected with torch.where instead of multiplied by the mask: 0 * inf would be NaN.
Empty selections give 0, never NaN, so all-masked rows and batches are harmless.
"""

from __future__ import annotations

from typing import Optional

import torch


def _keep(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype,
                                                        device=values.device))


def masked_count(mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Number of valid tokens (int64), over everything or along `dim`."""
    valid = mask.bool()
    return valid.sum() if dim is None else valid.sum(dim)


def masked_sum(values: torch.Tensor, mask: torch.Tensor,
               dim: Optional[int] = None) -> torch.Tensor:
    """Sum of values at valid tokens, over everything or along `dim`."""
    kept = _keep(values, mask)
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor,
                dim: Optional[int] = None) -> torch.Tensor:
    """Mean of values at valid tokens; 0 where nothing is valid."""
    total = masked_sum(values, mask, dim)
    count = masked_count(mask, dim).clamp(min=1).to(total.dtype)
    return total / count


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all valid tokens (scalar). Unbiased (n-1) by default; 0 when n <= 1."""
    count = masked_count(mask)
    centered = values - masked_mean(values, mask)
    sum_sq = masked_sum(centered * centered, mask)
    if not unbiased:
        return sum_sq / count.clamp(min=1).to(sum_sq.dtype)
    # where() rather than `if count <= 1` keeps this free of a device -> host sync.
    var = sum_sq / (count - 1).clamp(min=1).to(sum_sq.dtype)
    return torch.where(count > 1, var, torch.zeros_like(var))


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8,
                  shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the valid tokens of the whole tensor; 0 at padding.

    The statistics pool every valid token of the batch (REINFORCE++ and PPO whitening),
    with the unbiased variance. shift_mean=False adds the mean back (scale only).
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return _keep(whitened, mask)
