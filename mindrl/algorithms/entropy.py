"""Token entropy of the policy from logits, and its aggregation for an entropy bonus."""

from __future__ import annotations

import torch

from mindrl.algorithms.aggregation import aggregate_loss


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) - sum softmax(z) * z over the last (vocab) axis.

    This form never takes the log of a tiny probability, so it stays finite and accurate
    for peaked distributions where -sum p log p would meet log(0). Logits must be finite.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor,
                  agg_mode: str = "token-mean") -> torch.Tensor:
    """Mean entropy over valid tokens, aggregated like the policy loss it is added to
    (token-mean = masked mean)."""
    return aggregate_loss(entropy, mask, agg_mode)
