"""On-policy distillation: the student's own samples, pushed towards a teacher's distribution
(DISTILL_LOSSES).

The student samples, the teacher gives a log-prob to every sampled token, and the loss is a
per-token KL estimate between the two on those tokens, aggregated like the other terms
(loss_mask, loss_agg_mode). One loss is built: `reverse_kl`, KL(student || teacher) on the
student's samples, with the per-token estimator by name (KL_ESTIMATORS' k1, k2, k3, the KL
penalty's; algorithms/kl.py). `forward_kl_topk` (the teacher's top-k tokens) is not built.

As a loss on fixed samples x ~ student, the estimators differ in the gradient they give in
expectation (Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation"):
k2 = 0.5 (s - t)^2 gives (s - t) grad s, the gradient of KL(student || teacher); k3 =
e^(t - s) - (t - s) - 1 gives (1 - e^(t - s)) grad s, the gradient of KL(teacher || student)
(mode-covering); k1 = s - t gives grad s, zero in expectation (only a finite batch's noise
is left). Each pushes a token the student over-weights (s > t) down.
"""

from __future__ import annotations

import torch

from mindrl.algorithms.aggregation import aggregate_loss
from mindrl.algorithms.kl import token_kl
from mindrl.algorithms.registry import Registry

DISTILL_LOSSES = Registry("distillation loss")
ESTIMATORS = ("k1", "k2", "k3")      # the names rl_config.distill_estimator accepts


@DISTILL_LOSSES.register("reverse_kl")
def reverse_kl(log_probs: torch.Tensor, teacher_log_probs: torch.Tensor,
               estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate [B, R] of KL(student || teacher) at the student's sampled tokens:
    `log_probs` the student's (with its graph), `teacher_log_probs` the teacher's."""
    return token_kl(log_probs, teacher_log_probs.detach(), estimator)


def get_distill_loss(name: str):
    return DISTILL_LOSSES.lookup(name)


def distill_loss(log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, mask: torch.Tensor,
                 loss: str = "reverse_kl", estimator: str = "k3",
                 agg_mode: str = "token-mean") -> torch.Tensor:
    """The distillation term: the named loss per token, aggregated over the trained tokens
    (`mask`: loss_mask; a tool's inserted answer has none)."""
    return aggregate_loss(get_distill_loss(loss)(log_probs, teacher_log_probs, estimator),
                          mask, agg_mode)


def token_quantile(values: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile of `values` over the tokens where `mask` is 1 (0 when none is)."""
    kept = values[mask.bool()].float()
    if kept.numel() == 0:
        return torch.zeros((), dtype=torch.float32)
    return torch.quantile(kept, q)
