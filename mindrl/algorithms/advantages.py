"""Advantage estimators keyed by config name (ADVANTAGE_ESTIMATORS).

Every estimator takes the same keyword-only arguments, so the trainer calls any of them
by name with whatever the batch holds, and returns (advantages, returns), both [B, R] and
0 at padding:

    estimator(*, response_mask, scores=None, token_rewards=None, group_id=None,
              values=None, gamma=1.0, lam=1.0, eps=1e-6, norm_by_std=True)

  group_norm          GRPO: (r - group mean) / (group std + eps); norm_by_std=False is
                      Dr.GRPO (no std division). Needs scores, group_id.
  rloo                REINFORCE leave-one-out: r_i - mean of the other samples of the
                      group. Needs scores, group_id.
  reinforce_plus_plus REINFORCE++: discounted token returns, whitened over every valid
                      token of the batch. Needs token_rewards (or scores).
  gae                 PPO's generalised advantage estimation with a critic. Needs values
                      and token_rewards (or scores).

Outcome-level estimators (group_norm, rloo) broadcast one number per sequence over its
valid tokens and return it as `returns` too (there is no critic to regress).
Where token_rewards are needed but not given, the sequence score is put on the last
valid token (scores_to_token_rewards).

Group statistics: the std is the unbiased one (n - 1), as GRPO and torch.std use. A group
of one sample, or a group whose rewards are all equal, carries no relative signal and
gets advantage exactly 0 (checked on the group's max == min, not on a float std, so
rounding in the mean cannot leak a tiny nonzero value). Group ids may come in any order.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from mindrl.algorithms.kl import token_kl
from mindrl.algorithms.masked import masked_whiten
from mindrl.algorithms.registry import Registry

ADVANTAGE_ESTIMATORS = Registry("advantage estimator")

AdvantagesAndReturns = Tuple[torch.Tensor, torch.Tensor]


def get_advantage_estimator(name: str):
    return ADVANTAGE_ESTIMATORS.lookup(name)


# --------------------------------------------------------------------------- rewards


def scores_to_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] sequence scores -> [B, R] token rewards: the score sits on the last valid token.

    Rows without a valid token get no reward.
    """
    _check_rows(scores, response_mask, "scores")
    valid = response_mask.bool()
    positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(valid)
    last = torch.where(valid, positions, torch.full_like(positions, -1)).amax(dim=-1)
    dtype = scores.dtype if scores.is_floating_point() else torch.get_default_dtype()
    token_rewards = torch.zeros(valid.shape, dtype=dtype, device=scores.device)
    has_token = last >= 0
    rows = torch.arange(valid.shape[0], device=valid.device)[has_token]
    token_rewards[rows, last[has_token]] = scores[has_token].to(dtype)
    return token_rewards


def apply_kl_penalty(token_rewards: torch.Tensor, log_probs: torch.Tensor,
                     ref_log_probs: torch.Tensor, kl_coef: float, kl_penalty: str,
                     mask: torch.Tensor) -> torch.Tensor:
    """KL-in-reward (PPO-RLHF style): r_t - kl_coef * KL_t at valid tokens, 0 at padding.

    Returns a new tensor; the logprobs are detached because a reward carries no gradient.
    """
    kl = token_kl(log_probs.detach(), ref_log_probs.detach(), kl_penalty)
    penalised = token_rewards - kl_coef * kl
    return torch.where(mask.bool(), penalised, torch.zeros_like(penalised))


# --------------------------------------------------------------------------- groups


class _GroupStats(NamedTuple):
    """Per-sample views ([B]) of the statistics of the sample's group."""

    size: torch.Tensor
    total: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor  # unbiased; 0 for a group of one
    constant: torch.Tensor  # bool: every reward in the group is equal (incl. size 1)


def _group_stats(scores: torch.Tensor, group_id) -> _GroupStats:
    group_id = torch.as_tensor(group_id, device=scores.device)
    if group_id.shape != scores.shape:
        raise ValueError(f"group_id has shape {tuple(group_id.shape)}; it must match "
                         f"scores {tuple(scores.shape)} (one id per sample)")
    _, member_of, counts = torch.unique(group_id, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    size = counts.to(scores.dtype)
    total = scores.new_zeros(num_groups).index_add_(0, member_of, scores)
    mean = total / size
    deviation = scores - mean[member_of]
    sum_sq = scores.new_zeros(num_groups).index_add_(0, member_of, deviation * deviation)
    std = (sum_sq / (size - 1).clamp(min=1)).sqrt()
    high = scores.new_full((num_groups,), float("-inf")).scatter_reduce_(
        0, member_of, scores, "amax")
    low = scores.new_full((num_groups,), float("inf")).scatter_reduce_(
        0, member_of, scores, "amin")
    return _GroupStats(size[member_of], total[member_of], mean[member_of], std[member_of],
                       (high == low)[member_of])


def _broadcast_over_tokens(per_sample: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return per_sample.unsqueeze(-1) * response_mask.to(per_sample.dtype)


def _float_scores(scores: Optional[torch.Tensor], response_mask: torch.Tensor,
                  estimator: str) -> torch.Tensor:
    if scores is None:
        raise ValueError(f"advantage estimator {estimator!r} needs `scores` [B]")
    scores = torch.as_tensor(scores)
    if not scores.is_floating_point():
        scores = scores.to(torch.get_default_dtype())
    _check_rows(scores, response_mask, "scores")
    return scores


def _check_rows(per_sample: torch.Tensor, response_mask: torch.Tensor, name: str) -> None:
    if per_sample.dim() != 1 or per_sample.shape[0] != response_mask.shape[0]:
        raise ValueError(f"{name} has shape {tuple(per_sample.shape)}; expected "
                         f"[{response_mask.shape[0]}] to match response_mask "
                         f"{tuple(response_mask.shape)}")


def _require_group_id(group_id, estimator: str) -> None:
    if group_id is None:
        raise ValueError(f"advantage estimator {estimator!r} needs `group_id` [B]")


@ADVANTAGE_ESTIMATORS.register("group_norm")
def group_norm_advantages(*, response_mask: torch.Tensor,
                          scores: Optional[torch.Tensor] = None,
                          token_rewards: Optional[torch.Tensor] = None,
                          group_id: Optional[torch.Tensor] = None,
                          values: Optional[torch.Tensor] = None,
                          gamma: float = 1.0, lam: float = 1.0, eps: float = 1e-6,
                          norm_by_std: bool = True) -> AdvantagesAndReturns:
    """GRPO outcome advantage; Dr.GRPO when norm_by_std=False (removes the std bias
    towards groups that are nearly solved or nearly failed)."""
    scores = _float_scores(scores, response_mask, "group_norm")
    _require_group_id(group_id, "group_norm")
    group = _group_stats(scores, group_id)
    advantage = scores - group.mean
    if norm_by_std:
        advantage = advantage / (group.std + eps)
    advantage = torch.where(group.constant, torch.zeros_like(advantage), advantage)
    token_advantages = _broadcast_over_tokens(advantage, response_mask)
    return token_advantages, token_advantages


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(*, response_mask: torch.Tensor,
                    scores: Optional[torch.Tensor] = None,
                    token_rewards: Optional[torch.Tensor] = None,
                    group_id: Optional[torch.Tensor] = None,
                    values: Optional[torch.Tensor] = None,
                    gamma: float = 1.0, lam: float = 1.0, eps: float = 1e-6,
                    norm_by_std: bool = True) -> AdvantagesAndReturns:
    """RLOO (Ahmadian et al. 2024): the baseline of each sample is the mean reward of the
    other samples of its prompt, which keeps the estimator unbiased. A group of one has
    no other sample and gets 0."""
    scores = _float_scores(scores, response_mask, "rloo")
    _require_group_id(group_id, "rloo")
    group = _group_stats(scores, group_id)
    leave_one_out_mean = (group.total - scores) / (group.size - 1).clamp(min=1)
    advantage = scores - leave_one_out_mean
    advantage = torch.where(group.constant, torch.zeros_like(advantage), advantage)
    token_advantages = _broadcast_over_tokens(advantage, response_mask)
    return token_advantages, token_advantages


# --------------------------------------------------------------------------- token level


def _token_rewards_or_scores(token_rewards: Optional[torch.Tensor],
                             scores: Optional[torch.Tensor],
                             response_mask: torch.Tensor, estimator: str) -> torch.Tensor:
    if token_rewards is not None:
        if token_rewards.shape != response_mask.shape:
            raise ValueError(f"token_rewards has shape {tuple(token_rewards.shape)}; expected "
                             f"response_mask's {tuple(response_mask.shape)}")
        return token_rewards
    if scores is None:
        raise ValueError(f"advantage estimator {estimator!r} needs `token_rewards` [B, R] "
                         f"or `scores` [B]")
    return scores_to_token_rewards(_float_scores(scores, response_mask, estimator),
                                   response_mask)


def discounted_returns(token_rewards: torch.Tensor, response_mask: torch.Tensor,
                       gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_next, where `next` is the next valid token.

    Masked positions are skipped: they add no reward, are not discounted over and get
    return 0, so padding (or a masked hole such as tool output) never leaks into a return.
    """
    valid = response_mask.bool()
    rewards = torch.where(valid, token_rewards, torch.zeros_like(token_rewards))
    if gamma == 1.0:  # no discount: a reversed cumulative sum, no Python loop over R
        returns = rewards.flip(-1).cumsum(-1).flip(-1)
        return torch.where(valid, returns, torch.zeros_like(returns))
    returns = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[-1])):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(valid[:, t], running, torch.zeros_like(running))
    return returns


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
def reinforce_plus_plus_advantages(*, response_mask: torch.Tensor,
                                   scores: Optional[torch.Tensor] = None,
                                   token_rewards: Optional[torch.Tensor] = None,
                                   group_id: Optional[torch.Tensor] = None,
                                   values: Optional[torch.Tensor] = None,
                                   gamma: float = 1.0, lam: float = 1.0, eps: float = 1e-6,
                                   norm_by_std: bool = True) -> AdvantagesAndReturns:
    """REINFORCE++ (Hu 2025): discounted returns whitened over every valid token of the
    batch (global, not per group), with the unbiased variance and eps inside the sqrt.
    `returns` are the unwhitened discounted returns."""
    rewards = _token_rewards_or_scores(token_rewards, scores, response_mask,
                                       "reinforce_plus_plus")
    returns = discounted_returns(rewards, response_mask, gamma)
    return masked_whiten(returns, response_mask, eps=eps), returns


@ADVANTAGE_ESTIMATORS.register("gae")
def gae_advantages(*, response_mask: torch.Tensor,
                   scores: Optional[torch.Tensor] = None,
                   token_rewards: Optional[torch.Tensor] = None,
                   group_id: Optional[torch.Tensor] = None,
                   values: Optional[torch.Tensor] = None,
                   gamma: float = 1.0, lam: float = 1.0, eps: float = 1e-6,
                   norm_by_std: bool = True) -> AdvantagesAndReturns:
    """GAE (Schulman et al. 2016): delta_t = r_t + gamma V_next - V_t,
    A_t = delta_t + gamma lam A_next, with `next` the next valid token (V = A = 0 after
    the last one), masked positions skipped as in discounted_returns.

    returns = A + V (targets for the critic, from the raw advantages); the advantages
    handed to the policy are whitened over every valid token of the batch, as in PPO.
    """
    if values is None:
        raise ValueError("advantage estimator 'gae' needs critic `values` [B, R]")
    if values.shape != response_mask.shape:
        raise ValueError(f"values has shape {tuple(values.shape)}; expected "
                         f"response_mask's {tuple(response_mask.shape)}")
    rewards = _token_rewards_or_scores(token_rewards, scores, response_mask, "gae")
    valid = response_mask.bool()
    values = values.detach()
    advantages = torch.zeros_like(rewards)
    next_value = rewards.new_zeros(rewards.shape[0])
    next_advantage = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        next_advantage = torch.where(valid[:, t], advantage, next_advantage)
        advantages[:, t] = torch.where(valid[:, t], advantage, torch.zeros_like(advantage))
    returns = torch.where(valid, advantages + values, torch.zeros_like(advantages))
    return masked_whiten(advantages, response_mask, eps=eps), returns


def compute_advantages(name: str, **inputs) -> AdvantagesAndReturns:
    """Run the estimator registered as `name` on keyword inputs (see module docstring)."""
    return get_advantage_estimator(name)(**inputs)
