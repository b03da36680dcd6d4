"""Per-token estimators of KL(pi || pi_ref) from the sampled tokens' logprobs (KL_ESTIMATORS).

With log_ratio = log pi(x) - log pi_ref(x) for x ~ pi (Schulman, "Approximating KL
Divergence", 2020):
  kl  / k1: log_ratio                        unbiased, high variance, can be negative
  mse / k2: 0.5 * log_ratio**2               biased, low variance, always >= 0
  low_var_kl / k3: r - log r - 1, r = pi_ref/pi   unbiased, low variance, always >= 0
  abs: |log_ratio|
k3 exponentiates, so its log ratio is clamped to [-20, 20] and the result to [-10, 10]
(as GRPO implementations do) to keep one wild token from dominating the loss.
The same estimators serve as a loss term (kl_loss) and a reward penalty
(advantages.apply_kl_penalty).
"""

from __future__ import annotations

import torch

from mindrl.algorithms.aggregation import aggregate_loss
from mindrl.algorithms.registry import Registry

KL_ESTIMATORS = Registry("KL estimator")

K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


@KL_ESTIMATORS.register("kl", "k1")
def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs - ref_log_probs


@KL_ESTIMATORS.register("mse", "k2")
def kl_k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    log_ratio = log_probs - ref_log_probs
    return 0.5 * log_ratio * log_ratio


@KL_ESTIMATORS.register("low_var_kl", "k3")
def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    ref_over_policy = (ref_log_probs - log_probs).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    k3 = torch.exp(ref_over_policy) - ref_over_policy - 1.0
    return k3.clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)


@KL_ESTIMATORS.register("abs")
def kl_abs(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return (log_probs - ref_log_probs).abs()


def get_kl_estimator(name: str):
    return KL_ESTIMATORS.lookup(name)


def token_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
             kl_penalty: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate [B, R] with the named estimator (padding not masked)."""
    return get_kl_estimator(kl_penalty)(log_probs, ref_log_probs)


def kl_loss(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, mask: torch.Tensor,
            kl_penalty: str = "low_var_kl", agg_mode: str = "token-mean") -> torch.Tensor:
    """KL as a loss term (GRPO's beta * KL): per-token estimate aggregated over valid tokens."""
    return aggregate_loss(token_kl(log_probs, ref_log_probs, kl_penalty), mask, agg_mode)
