"""Importance weights correcting for the rollout engine's sampling distribution.

vLLM samples with slightly different numerics (kernels, precision) from the training
engine, so the tokens come from pi_rollout, not pi_old. Truncated importance sampling
(TIS, Yao et al. 2025) reweights each token by pi_old / pi_rollout, capped so that a
rare mismatch cannot blow up the gradient. ROLLOUT_CORRECTIONS holds the modes that
`rl_config.rollout_is` names:

  off       no weights (None)
  token     min(exp(old - rollout), cap) per token
  sequence  min(exp(sum over the sample's valid tokens of (old - rollout)), cap), one
            weight per sample broadcast over its valid tokens

Every mode returns (weights [B, R] or None, stats) with stats holding sums, not means
(`weight_sum`, `count`, `capped`: over valid tokens in token mode, over samples with a
valid token in sequence mode), so callers can reduce them exactly across micro batches
and ranks. A weight is "capped" when its untruncated value exceeds the cap.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch

from mindrl.algorithms.registry import Registry

ROLLOUT_CORRECTIONS = Registry("rollout correction mode")

# exp() beyond this overflows float32; the cap (a small number) applies long before.
_LOG_RATIO_CLAMP = 20.0

WeightsAndStats = Tuple[Optional[torch.Tensor], Dict[str, torch.Tensor]]


def _check_cap(cap: float) -> None:
    if not cap > 1.0:
        raise ValueError(f"truncated IS cap must be > 1 (a weight of 1 is no correction), "
                         f"got {cap}")


def truncated_is_weight(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                        mask: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """min(exp(old - rollout), cap) per token, detached, 0 at padding; pass as is_weights."""
    if cap <= 0:
        raise ValueError(f"truncated IS cap must be > 0, got {cap}")
    with torch.no_grad():
        # The clamp before exp only avoids inf; min(., cap) is what truncates.
        log_ratio = (old_log_probs - rollout_log_probs).clamp(max=_LOG_RATIO_CLAMP)
        weight = torch.exp(log_ratio).clamp(max=cap)
        return torch.where(mask.bool(), weight, torch.zeros_like(weight))


@ROLLOUT_CORRECTIONS.register("off")
def no_correction(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                  mask: torch.Tensor, cap: float = 2.0) -> WeightsAndStats:
    """No weights and no stats: the loss is the plain surrogate."""
    return None, {}


@ROLLOUT_CORRECTIONS.register("token")
def token_is_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                     mask: torch.Tensor, cap: float = 2.0) -> WeightsAndStats:
    """Per-token truncated IS (TIS); stats over valid tokens."""
    _check_cap(cap)
    valid = mask.bool()
    with torch.no_grad():
        weights = truncated_is_weight(old_log_probs, rollout_log_probs, valid, cap)
        # Compared in log space: the clamp and exp cannot blur a weight just above the cap.
        log_ratio = torch.where(valid, old_log_probs - rollout_log_probs,
                                torch.zeros_like(old_log_probs))
        capped = valid & (log_ratio > math.log(cap))
        stats = {"weight_sum": weights.sum(), "count": valid.sum().to(weights.dtype),
                 "capped": capped.sum().to(weights.dtype)}
    return weights, stats


@ROLLOUT_CORRECTIONS.register("sequence")
def sequence_is_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                        mask: torch.Tensor, cap: float = 2.0) -> WeightsAndStats:
    """Per-sample truncated IS on the sequence likelihood ratio (MIS); stats over samples
    with at least one valid token (empty samples get weight 0 and are not counted)."""
    _check_cap(cap)
    valid = mask.bool()
    with torch.no_grad():
        # Padding may hold garbage: select it away before summing.
        log_ratio = torch.where(valid, old_log_probs - rollout_log_probs,
                                torch.zeros_like(old_log_probs)).sum(-1)
        has_token = valid.any(-1)
        per_sample = torch.exp(log_ratio.clamp(max=_LOG_RATIO_CLAMP)).clamp(max=cap)
        per_sample = torch.where(has_token, per_sample, torch.zeros_like(per_sample))
        weights = torch.where(valid, per_sample.unsqueeze(-1), torch.zeros_like(old_log_probs))
        capped = has_token & (log_ratio > math.log(cap))
        stats = {"weight_sum": per_sample.sum(), "count": has_token.sum().to(weights.dtype),
                 "capped": capped.sum().to(weights.dtype)}
    return weights, stats


def get_rollout_correction(name: str):
    return ROLLOUT_CORRECTIONS.lookup(name)


def rollout_is_weights(mode: str, old_log_probs: torch.Tensor,
                       rollout_log_probs: torch.Tensor, mask: torch.Tensor,
                       cap: float = 2.0) -> WeightsAndStats:
    """The weights and stats of the mode registered as `mode` (see module docstring)."""
    return get_rollout_correction(mode)(old_log_probs, rollout_log_probs, mask, cap)
