"""The actor's objective on one micro batch, and how its metrics reduce.

The engine runs the passes (forward, micro batches, backward, optimizer, the collectives over
ranks); this module is the maths between its log-probs and its backward: the policy loss
looked up by name (POLICY_LOSSES), the KL loss against the reference, the distillation term
against a teacher (DISTILL_LOSSES; with `distill_use_task_reward` false it replaces the
policy-gradient term), the entropy bonus, the rollout-correction importance weights
(ROLLOUT_CORRECTIONS), and the micro-batch weighting
that makes the sum over micro batches and the average over DP ranks the mini batch's mean.

`cfg` is the actor's LossConfig (config/roles.py), read by attribute: this module imports only
torch and mindrl.algorithms.

Stale samples (asynchronous GRPO): with old_log_probs recomputed by the actor (the proximal
policy) and rollout_is token, the loss is AReaL's decoupled PPO, the ratio clipped against the
proximal policy and each token weighted by min(pi_prox / pi_behav, cap), pi_behav the rollout
engine's log-probs (docs/guides/async.md#the-objective).

Metrics travel in three steps, all described by METRICS, one row per reported key:
  1. a micro batch reports parts (`micro_batch_loss`): shares of a mini-batch mean, counts
     and sums, or a maximum;
  2. a mini batch sums the parts (or takes their max) over its micro batches and ranks
     (`micro_batch_totals`; the engine all-reduces the vector) and derives its metrics
     (`mini_batch_metrics`);
  3. a step merges its mini batches' metrics (`merge_mini_batches`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from mindrl.algorithms.aggregation import aggregate_loss
from mindrl.algorithms.distill import distill_loss
from mindrl.algorithms.importance import rollout_is_weights
from mindrl.algorithms.kl import kl_loss
from mindrl.algorithms.policy_loss import get_policy_loss

# Over a mini batch's micro batches and ranks:
SUM = "sum"        # the parts summed (shares of the mini batch's mean, or counts)
MAX = "max"        # the largest part
RATIO = "ratio"    # sum of parts[0] / sum of parts[1]
# Over a step's mini batches:
MEAN = "mean"      # the mini batches' mean
FIRST = "first"    # the first mini batch's (before any update changed the policy)
POOLED = "pooled"  # weighted by each mini batch's `when` count: exact over all of them
DROP = "drop"      # reported per mini batch only (it weighs a POOLED metric)


@dataclass(frozen=True)
class Metric:
    """One reported key: the micro-batch parts it is made of and how it reduces."""

    key: str
    reduce: str                    # SUM, MAX or RATIO over micro batches and ranks
    merge: str                     # MEAN, FIRST, POOLED or DROP over a step's mini batches
    parts: Tuple[str, ...] = ()    # the micro batch's keys; () = (key,)
    when: Optional[str] = None     # reported only where this summed part is > 0

    @property
    def sources(self) -> Tuple[str, ...]:
        return self.parts or (self.key,)


IS_COUNT = "rollout/is_count"       # tokens, or sequences in sequence mode
DISTILL_COUNT = "actor/distill_count"   # trained tokens, with a distillation term only
DIFF_COUNT = "rollout/logprob_diff_count"

METRICS: Tuple[Metric, ...] = (
    # Shares of the mini batch's mean (loss_agg_mode's weighting), summed.
    Metric("actor/pg_loss", SUM, MEAN),
    Metric("actor/kl_loss", SUM, MEAN),
    Metric("actor/entropy", SUM, MEAN),
    Metric("actor/pg_clipfrac", SUM, MEAN),
    Metric("actor/ppo_kl", SUM, MEAN),
    # The distillation term against the teacher (rl_config.distill_loss); absent when off.
    Metric("actor/distill_loss", SUM, MEAN, when=DISTILL_COUNT),
    Metric(DISTILL_COUNT, SUM, DROP, when=DISTILL_COUNT),
    # The rollout engine's sampled log-probs against the trainer's, over the valid tokens.
    Metric("rollout/logprob_diff_mean", RATIO, FIRST,
           ("rollout/logprob_diff_sum", DIFF_COUNT), when=DIFF_COUNT),
    Metric("rollout/logprob_diff_max", MAX, FIRST, when=DIFF_COUNT),
    # Truncated importance weights (rl_config.rollout_is); absent when off.
    Metric("rollout/is_weight_mean", RATIO, POOLED, ("rollout/is_weight_sum", IS_COUNT),
           when=IS_COUNT),
    Metric("rollout/is_capped_fraction", RATIO, POOLED,
           ("rollout/is_capped_count", IS_COUNT), when=IS_COUNT),
    Metric(IS_COUNT, SUM, DROP, when=IS_COUNT),
)


def _parts(reduce: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(p for m in METRICS if m.reduce in reduce for p in m.sources))


SUMMED_PARTS = _parts((SUM, RATIO))   # the first entries of micro_batch_totals' vector
MAXED_PARTS = _parts((MAX,))          # the rest of it


def trained_tokens(fields: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """[mb, R] the tokens the objective reads: `loss_mask` (a subset of response_mask: an
    episode's inserted tokens are real but never trained); a batch made without one (by
    hand) trains every real token."""
    return fields["loss_mask"] if "loss_mask" in fields else fields["response_mask"]


def mini_batch_weight(mask: torch.Tensor, agg_mode: str) -> torch.Tensor:
    """What the mini-batch loss is a mean over: valid tokens, or sequences with tokens."""
    if agg_mode == "token-mean":
        return mask.sum()
    return (mask.sum(-1) > 0).sum()


def _is_weights(old: torch.Tensor, micro: Mapping[str, torch.Tensor], mask: torch.Tensor,
                cfg) -> Tuple[Optional[torch.Tensor], Dict[str, torch.Tensor]]:
    """Truncated IS weights on old / rollout (rl_config.rollout_is) and their summed stats
    as parts; (None, {}) when off."""
    if cfg.rollout_is == "off":
        return None, {}
    if "rollout_log_probs" not in micro:
        raise ValueError(f"rl_config.rollout_is={cfg.rollout_is!r} needs the batch's "
                         f"rollout_log_probs (the rollout engine's sampled-token "
                         f"log-probs); set rl_config.rollout_is to 'off' without them")
    weights, stats = rollout_is_weights(cfg.rollout_is, old, micro["rollout_log_probs"],
                                        mask, cfg.rollout_is_cap)
    return weights, {"rollout/is_weight_sum": stats["weight_sum"], IS_COUNT: stats["count"],
                     "rollout/is_capped_count": stats["capped"]}


def _logprob_diff(log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                  mask: torch.Tensor) -> Dict[str, torch.Tensor]:
    """How far the rollout engine's sampled log-probs are from the trainer's on the same
    tokens: exact on the first mini batch (nothing updated yet)."""
    diff = (log_probs.detach() - rollout_log_probs).abs() * mask
    return {"rollout/logprob_diff_sum": diff.sum(), DIFF_COUNT: mask.sum(),
            "rollout/logprob_diff_max": (diff.max() if diff.numel()
                                         else torch.zeros((), device=diff.device))}


def entropy_bonus(entropy: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  cfg) -> torch.Tensor:
    """The entropy the bonus maximises, aggregated over the trained tokens: every token's
    (entropy_tokens "all"), or only those of samples with a non-zero advantage ("learning"),
    the others counting 0 in the same denominator, so a micro batch with nothing to learn
    adds no bonus."""
    if cfg.entropy_tokens == "learning":
        entropy = entropy * (advantages != 0).to(entropy.dtype)
    return aggregate_loss(entropy, mask, cfg.loss_agg_mode)


def micro_batch_loss(log_probs: torch.Tensor, entropy: torch.Tensor,
                     micro: Mapping[str, torch.Tensor], cfg, mini_weight: torch.Tensor,
                     num_micro: int, dp_size: int) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """The loss to backpropagate for one micro batch and its metric parts (METRICS' sources).

    log_probs, entropy [mb, R]: the current policy's, response-aligned, with their graph.
    micro: loss_mask (trained_tokens) and advantages [mb, R]; old_log_probs (absent: on-policy, the
    detached current log-probs), ref_log_probs (with the KL loss), teacher_log_probs (with
    a distillation term), rollout_log_probs (the IS weights and the log-prob diff) when
    present. The loss: the policy-gradient term (unless distillation replaces it), + kl_coef
    x KL, + distill_coef x the distillation term, - entropy_coeff x entropy. mini_weight:
    mini_batch_weight of the whole mini batch; the micro batch's mean is re-weighted by its
    share of it, so the sum over num_micro micro batches (the schedule divides by their
    number) and the average over dp_size ranks (DDP) is the mean over the mini batch.
    """
    mask = trained_tokens(micro).float()
    # Entropy is always reported; it enters the loss (and the graph) only with a coefficient.
    if not cfg.entropy_coeff > 0:
        entropy = entropy.detach()
    old = micro.get("old_log_probs", log_probs.detach())
    is_weights, is_parts = _is_weights(old, micro, mask, cfg)
    pg, stats = get_policy_loss(cfg.policy_loss)(
        log_probs, old, micro["advantages"], mask, clip_ratio=cfg.clip_ratio,
        clip_ratio_low=cfg.clip_ratio_low, clip_ratio_high=cfg.clip_ratio_high,
        clip_ratio_c=cfg.clip_ratio_c, loss_agg_mode=cfg.loss_agg_mode,
        is_weights=is_weights)
    distilling = cfg.distill_loss is not None
    # Distillation alone: the task reward's policy gradient is off (still reported).
    task = not distilling or cfg.distill_use_task_reward
    loss = pg if task else torch.zeros((), device=log_probs.device)
    kl = torch.zeros((), device=log_probs.device)
    if cfg.use_kl_loss and cfg.kl_coef > 0:
        kl = kl_loss(log_probs, micro["ref_log_probs"], mask, cfg.kl_penalty, cfg.loss_agg_mode)
        loss = loss + cfg.kl_coef * kl
    if distilling:
        distill = distill_loss(log_probs, micro["teacher_log_probs"], mask, cfg.distill_loss,
                               cfg.distill_estimator, cfg.loss_agg_mode)
        loss = loss + cfg.distill_coef * distill
    mean_entropy = aggregate_loss(entropy, mask, cfg.loss_agg_mode)
    if cfg.entropy_coeff > 0:
        loss = loss - cfg.entropy_coeff * entropy_bonus(entropy, micro["advantages"], mask, cfg)
    share = mini_batch_weight(mask, cfg.loss_agg_mode) / mini_weight.clamp(min=1)
    scale = share * num_micro * dp_size
    parts = {"actor/pg_loss": pg.detach() * share, "actor/kl_loss": kl.detach() * share,
             "actor/entropy": mean_entropy.detach() * share,
             "actor/pg_clipfrac": stats["pg_clipfrac"] * share,
             "actor/ppo_kl": stats["ppo_kl"] * share, **is_parts}
    if distilling:
        parts.update({"actor/distill_loss": distill.detach() * share, DISTILL_COUNT: mask.sum()})
    if "rollout_log_probs" in micro:
        parts.update(_logprob_diff(log_probs, micro["rollout_log_probs"], mask))
    return loss * scale, parts


def micro_batch_totals(items: Sequence[Mapping[str, torch.Tensor]],
                       device) -> torch.Tensor:
    """[SUMMED_PARTS summed..., MAXED_PARTS' max...] over this rank's micro batches (zeros
    where a part, or every micro batch, is absent: a pipeline stage before the last), in
    float32 on `device` for the engine to all-reduce (the first len(SUMMED_PARTS) by sum,
    the rest by max)."""
    n = len(SUMMED_PARTS)
    vec = torch.zeros(n + len(MAXED_PARTS), device=device)
    zero = torch.zeros((), device=vec.device)   # not a view of vec: vec is summed into
    for item in items:
        vec[:n] += torch.stack([item.get(k, zero).float().reshape(()).to(vec.device)
                                for k in SUMMED_PARTS])
        for i, k in enumerate(MAXED_PARTS):
            vec[n + i] = torch.maximum(vec[n + i], item.get(k, zero).float().to(vec.device))
    return vec


def mini_batch_metrics(totals: Sequence[float]) -> Dict[str, float]:
    """A mini batch's METRICS from its reduced micro_batch_totals (as floats)."""
    values = dict(zip(SUMMED_PARTS + MAXED_PARTS, totals))
    out = {}
    for m in METRICS:
        if m.when is not None and not values[m.when] > 0:
            continue
        if m.reduce == RATIO:
            out[m.key] = values[m.parts[0]] / values[m.parts[1]]
        else:
            out[m.key] = values[m.sources[0]]
    return out


def merge_mini_batches(history: List[Dict[str, float]]) -> Dict[str, float]:
    """One step's metrics from its mini batches' (METRICS' merge; keys outside the table,
    such as the optimizer's, are averaged)."""
    merge = {m.key: m.merge for m in METRICS}
    first = history[0]
    out = {k: sum(h[k] for h in history) / len(history) for k in first
           if merge.get(k, MEAN) == MEAN}
    out.update({k: v for k, v in first.items() if merge.get(k) == FIRST})
    for m in METRICS:
        if m.merge != POOLED:
            continue
        count = sum(h.get(m.when, 0.0) for h in history)
        if count > 0:
            out[m.key] = sum(h[m.key] * h[m.when] for h in history
                             if h.get(m.when, 0.0) > 0) / count
    return out
