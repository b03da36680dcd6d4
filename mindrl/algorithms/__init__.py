"""Pure tensor maths of RL post-training: advantages, KL estimators, policy and distillation
losses.

Imports only torch; no I/O, no torch.distributed. Each family is a registry keyed by the
config's names (ADVANTAGE_ESTIMATORS, DISTILL_LOSSES, KL_ESTIMATORS, LOSS_AGGREGATORS,
POLICY_LOSSES, ROLLOUT_CORRECTIONS); get_* looks a name up and raises ValueError listing the
known names.
Shapes: token quantities and masks [B, R], scores and group_id [B]. objective.py assembles
them into the actor's loss on a micro batch, with the table of its metrics' reductions.
"""

from mindrl.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    apply_kl_penalty,
    compute_advantages,
    discounted_returns,
    gae_advantages,
    get_advantage_estimator,
    group_norm_advantages,
    reinforce_plus_plus_advantages,
    rloo_advantages,
    scores_to_token_rewards,
)
from mindrl.algorithms.aggregation import LOSS_AGGREGATORS, aggregate_loss, get_loss_aggregator
from mindrl.algorithms.distill import DISTILL_LOSSES, distill_loss, get_distill_loss
from mindrl.algorithms.entropy import entropy_bonus, entropy_coeff_at, entropy_from_logits
from mindrl.algorithms.importance import (
    ROLLOUT_CORRECTIONS,
    get_rollout_correction,
    rollout_is_weights,
    truncated_is_weight,
)
from mindrl.algorithms.kl import KL_ESTIMATORS, get_kl_estimator, kl_loss, token_kl
from mindrl.algorithms.masked import (
    masked_count,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from mindrl.algorithms.policy_loss import POLICY_LOSSES, get_policy_loss, ppo_clip_loss
from mindrl.algorithms.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS", "DISTILL_LOSSES", "KL_ESTIMATORS", "LOSS_AGGREGATORS",
    "POLICY_LOSSES", "Registry",
    "ROLLOUT_CORRECTIONS", "get_rollout_correction", "rollout_is_weights",
    "aggregate_loss", "apply_kl_penalty", "compute_advantages", "discounted_returns",
    "distill_loss", "get_distill_loss",
    "entropy_bonus", "entropy_coeff_at", "entropy_from_logits", "gae_advantages", "get_advantage_estimator",
    "get_kl_estimator", "get_loss_aggregator", "get_policy_loss", "group_norm_advantages",
    "kl_loss", "masked_count", "masked_mean", "masked_sum", "masked_var", "masked_whiten",
    "ppo_clip_loss", "reinforce_plus_plus_advantages", "rloo_advantages",
    "scores_to_token_rewards", "token_kl", "truncated_is_weight",
]
