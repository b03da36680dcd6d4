"""Policy-gradient losses keyed by config name (POLICY_LOSSES).

ppo_clip: the PPO clipped surrogate (Schulman et al. 2017) as GRPO uses it, with
  - asymmetric bounds ("clip-higher", DAPO): ratio clipped to [1 - low, 1 + high], so
    unlikely tokens with positive advantage can grow more before the clip stops them;
  - dual clip (Ye et al. 2020): for negative advantages the loss is also capped at
    -A * clip_ratio_c, so a token whose ratio has exploded cannot dominate the update;
  - optional per-token importance weights (e.g. truncated_is_weight for the rollout /
    training engine mismatch), multiplied into the per-token loss.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from mindrl.algorithms.aggregation import aggregate_loss
from mindrl.algorithms.masked import masked_mean
from mindrl.algorithms.registry import Registry

POLICY_LOSSES = Registry("policy loss")

# exp() of a log ratio beyond this overflows float32 / is meaningless; the clip acts anyway.
LOG_RATIO_CLAMP = 20.0


def get_policy_loss(name: str):
    return POLICY_LOSSES.lookup(name)


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                  advantages: torch.Tensor, mask: torch.Tensor,
                  clip_ratio: float = 0.2, clip_ratio_low: Optional[float] = None,
                  clip_ratio_high: Optional[float] = None,
                  clip_ratio_c: Optional[float] = None,
                  loss_agg_mode: str = "token-mean",
                  is_weights: Optional[torch.Tensor] = None,
                  ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Clipped surrogate loss (to minimise) and detached scalar stats.

    Per token, with ratio = exp(log_probs - old_log_probs):
        loss = max(-A * ratio, -A * clamp(ratio, 1 - low, 1 + high))
        and, when clip_ratio_c is set and A < 0: loss = min(loss, -A * clip_ratio_c)
    low/high default to clip_ratio. Stats:
        pg_clipfrac        fraction of valid tokens where the clipped branch is active
        pg_clipfrac_lower  fraction of valid tokens where the dual clip is active
        ppo_kl             masked mean of old_log_probs - log_probs (k1 of new vs old)
    """
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    if low < 0 or high < 0:
        raise ValueError(f"clip ratios must be >= 0, got low={low}, high={high}")
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c={clip_ratio_c} must be > 1 (dual clip caps the loss "
                         f"of negative advantages at -A * clip_ratio_c; 3.0 is usual)")

    # Padding may hold garbage (NaN, inf); select it away before any arithmetic so that
    # neither the loss nor the gradient reaching log_probs can pick it up.
    valid = mask.bool()
    log_ratio = torch.where(valid, log_probs - old_log_probs, torch.zeros_like(log_probs))
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    advantages = torch.where(valid, advantages, torch.zeros_like(advantages))
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
    per_token = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped

    dual_active = torch.zeros_like(clip_active)
    if clip_ratio_c is not None:
        dual_cap = -advantages * clip_ratio_c
        dual_active = (advantages < 0) & (per_token > dual_cap)
        per_token = torch.where(dual_active, dual_cap, per_token)

    if is_weights is not None:
        per_token = per_token * torch.where(valid, is_weights.detach(),
                                            torch.zeros_like(is_weights))

    loss = aggregate_loss(per_token, mask, loss_agg_mode)
    with torch.no_grad():
        stats = {
            "pg_clipfrac": masked_mean(clip_active.to(log_probs.dtype), mask),
            "pg_clipfrac_lower": masked_mean(dual_active.to(log_probs.dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
        }
    return loss, stats
