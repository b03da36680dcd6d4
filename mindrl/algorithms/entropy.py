"""Token entropy of the policy from logits, and its aggregation for an entropy bonus."""

from __future__ import annotations

from typing import Optional

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


def entropy_coeff_at(step: int, start: float, final: Optional[float] = None,
                     decay_steps: int = 0) -> float:
    """The entropy bonus's coefficient at training step `step` (1 = the first update): `start`,
    moving linearly to `final` over `decay_steps` steps and staying there (constant when
    `final` is None or `decay_steps` is 0).

    Why decay: once most groups score alike their advantages are 0 and the bonus is what is
    left of the gradient; Adam rescales it to full-size steps and the policy unlearns. Early
    on, the bonus is what keeps a fresh policy sampling answers it has not yet been rewarded
    for. A function of the step alone, so a resumed run gets the same coefficients."""
    if final is None or decay_steps <= 0:
        return start
    done = min(max(step - 1, 0), decay_steps) / decay_steps
    return start + (final - start) * done
