"""The off-policy objective of asynchronous GRPO, AReaL's decoupled PPO: clip against the
proximal policy (the old log-probs the actor recomputes) and weight each token by the
truncated pi_prox / pi_behav (pi_behav: the rollout engine's sampling log-probs), which is
micro_batch_loss with old_log_probs, rollout_log_probs and rollout_is token. Checked against
the formula by hand, per token:

    loss_t = -min(pi_prox / pi_behav, cap) x min(r_t A_t, clip(r_t, 1 - e, 1 + e) A_t),
    r_t = pi_theta / pi_prox
"""

import math

import pytest
import torch

from mindrl.algorithms.objective import micro_batch_loss
from mindrl.config.roles import LossConfig

LN = math.log


def stale_batch():
    """Two samples, three valid tokens (padding holds garbage).

    pi_theta 0.5, 0.75 | 0.2; pi_prox 0.5, 0.5 | 0.4 (r = 1, 1.5 | 0.5);
    pi_behav 0.4, 0.2 | 0.5 (weights 1.25, 2.5 -> capped at 2, 0.8); A = 1, 1 | -2.
    Per token: -1.25 x 1; -2 x min(1.5, 1.2) = -2.4 (clipped); -0.8 x min(-1, -1.6) = 1.28
    (clipped). Token mean: (-1.25 - 2.4 + 1.28) / 3 = -0.79."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    log_probs = torch.tensor([[LN(0.5), LN(0.75), 3.0], [LN(0.2), 0.0, 0.0]], requires_grad=True)
    micro = {"response_mask": mask,
             "advantages": torch.tensor([[1.0, 1.0, 5.0], [-2.0, 0.0, 0.0]]),
             "old_log_probs": torch.tensor([[LN(0.5), LN(0.5), float("nan")],
                                            [LN(0.4), 0.0, 0.0]]),
             "rollout_log_probs": torch.tensor([[LN(0.4), LN(0.2), -40.0],
                                                [LN(0.5), 0.0, 0.0]])}
    return log_probs, torch.zeros(2, 3), micro


def test_the_decoupled_loss_equals_the_hand_computed_formula():
    log_probs, entropy, micro = stale_batch()
    cfg = LossConfig(rollout_is="token", rollout_is_cap=2.0)
    loss, parts = micro_batch_loss(log_probs, entropy, micro, cfg, torch.tensor(3), 1, 1)
    assert loss.item() == pytest.approx(-0.79, abs=1e-6)
    assert parts["actor/pg_clipfrac"].item() == pytest.approx(2 / 3)
    # the token-level weights: their sum (1.25 + 2 + 0.8), count and how many were capped
    assert parts["rollout/is_weight_sum"].item() == pytest.approx(4.05, abs=1e-6)
    assert parts["rollout/is_count"].item() == 3
    assert parts["rollout/is_capped_count"].item() == 1
    loss.backward()
    # only the unclipped token has a gradient: -A x r x w / 3 tokens
    expected = torch.tensor([[-1.25 / 3, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(log_probs.grad, expected, atol=1e-6)


def test_without_the_behaviour_weight_stale_tokens_count_as_on_policy():
    """rollout_is off: plain PPO against the proximal policy, what the decoupled objective
    corrects (the same tokens, weights 1): (-1 - 1.2 + 1.6) / 3 = -0.2."""
    log_probs, entropy, micro = stale_batch()
    loss, parts = micro_batch_loss(log_probs, entropy, micro, LossConfig(), torch.tensor(3), 1, 1)
    assert loss.item() == pytest.approx(-0.2, abs=1e-6)
    assert "rollout/is_weight_sum" not in parts
