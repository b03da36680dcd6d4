"""Importance weights correcting for the rollout engine's sampling distribution.

vLLM samples with slightly different numerics (kernels, precision) from the training
engine, so the tokens come from pi_rollout, not pi_old. Truncated importance sampling
(TIS, Yao et al. 2025) reweights each token by pi_old / pi_rollout, capped so that a
rare mismatch cannot blow up the gradient.
"""

from __future__ import annotations

import torch


def truncated_is_weight(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                        mask: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """min(exp(old - rollout), cap) per token, detached, 0 at padding; pass as is_weights."""
    if cap <= 0:
        raise ValueError(f"truncated IS cap must be > 0, got {cap}")
    with torch.no_grad():
        # The clamp before exp only avoids inf; min(., cap) is what truncates.
        log_ratio = (old_log_probs - rollout_log_probs).clamp(max=20.0)
        weight = torch.exp(log_ratio).clamp(max=cap)
        return torch.where(mask.bool(), weight, torch.zeros_like(weight))
