"""The step's advantage phase: sequence scores -> token rewards (minus the in-reward KL
penalty when the reference is used without a KL loss) -> advantages, by rl_config's names."""

from __future__ import annotations

from typing import Dict

import torch

from mindrl.algorithms import apply_kl_penalty, compute_advantages, scores_to_token_rewards
from mindrl.config.schema import RLConfig
from mindrl.data.batch import Batch


def advantage_fields(batch: Batch, rl: RLConfig) -> Dict[str, torch.Tensor]:
    """{"token_rewards", "advantages"} [B, R] for a scored batch (with ref_log_probs when
    rl.uses_reference; the penalty is taken against the old log-probs, or the rollout's when
    no old-log-prob pass ran)."""
    # Over the trained tokens: a score lands on the last sampled one, and estimators that
    # whiten over tokens do not count an episode's inserted tokens.
    scores, mask = batch["scores"], batch.trained_mask()
    token_rewards = scores_to_token_rewards(scores, mask)
    if rl.uses_reference and not rl.use_kl_loss:
        behaviour = batch["old_log_probs"] if "old_log_probs" in batch else \
            batch["rollout_log_probs"]
        token_rewards = apply_kl_penalty(token_rewards, behaviour, batch["ref_log_probs"],
                                         rl.kl_coef, rl.kl_penalty, mask)
    advantages, _ = compute_advantages(rl.adv_estimator, scores=scores,
                                       token_rewards=token_rewards, response_mask=mask,
                                       group_id=batch["group_id"], gamma=rl.gamma, lam=rl.lam)
    return {"token_rewards": token_rewards, "advantages": advantages}
