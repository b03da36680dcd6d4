"""The actor's objective (algorithms/objective.py) on a tiny hand-computed example, its
micro-batch weighting, and its metric table's reductions."""

import math

import pytest
import torch

from mindrl.algorithms import objective
from mindrl.algorithms.objective import (MAXED_PARTS, METRICS, SUMMED_PARTS,
                                         merge_mini_batches, micro_batch_loss,
                                         micro_batch_totals, mini_batch_metrics,
                                         mini_batch_weight)
from mindrl.config.roles import LossConfig

LN = math.log


def loss_cfg(**overrides) -> LossConfig:
    """The actor's LossConfig with the k1 KL estimator (hand-computable)."""
    return LossConfig(**{"kl_penalty": "kl", **overrides})


def tiny():
    """Two samples, three valid tokens: ratios 1, 1.5 (A = 1) and 0.5 (A = -2).

    ppo_clip at 0.2, per token: -1; max(-1.5, -1.2) = -1.2 (clipped); max(1.0, 1.6) = 1.6
    (clipped). Token mean: (-1 - 1.2 + 1.6) / 3 = -0.2; clip fraction 2/3; ppo_kl = mean of
    old - new = (0 - ln 1.5 - ln 0.5) / 3."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    log_probs = torch.tensor([[0.0, LN(1.5), 9.0], [LN(0.5), 0.0, 0.0]], requires_grad=True)
    micro = {"response_mask": mask,
             "advantages": torch.tensor([[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0]]),
             "old_log_probs": torch.zeros(2, 3),
             # new - ref = 0.3, 0.6, 0.0 at the valid tokens: k1 mean 0.3
             "ref_log_probs": log_probs.detach() - torch.tensor([[0.3, 0.6, 5.0], [0.0, 0, 0]])}
    entropy = torch.tensor([[1.0, 2.0, 7.0], [3.0, 0.0, 0.0]], requires_grad=True)
    return log_probs, entropy, micro


def test_loss_and_parts_equal_the_hand_computed_values():
    log_probs, entropy, micro = tiny()
    cfg = loss_cfg(use_kl_loss=True, kl_coef=0.5, entropy_coeff=0.1)
    # This micro batch holds 3 of the mini batch's 6 tokens (share 0.5); 2 micro batches, 1 rank.
    loss, parts = micro_batch_loss(log_probs, entropy, micro, cfg, torch.tensor(6), 2, 1)
    # -0.2 + 0.5 x 0.3 - 0.1 x mean entropy 2, times share x micro batches x ranks = 1
    assert loss.item() == pytest.approx(-0.2 + 0.15 - 0.2, abs=1e-6)
    expected = {"actor/pg_loss": -0.1, "actor/kl_loss": 0.15, "actor/entropy": 1.0,
                "actor/pg_clipfrac": 1 / 3, "actor/ppo_kl": (-LN(1.5) - LN(0.5)) / 6}
    assert {k: v.item() for k, v in parts.items()} == pytest.approx(expected, abs=1e-6)
    # The graph reaches both inputs: the entropy enters the loss with its coefficient.
    loss.backward()
    # d/d entropy of -0.1 x token mean over 3 tokens = -0.1 / 3 at each valid token
    assert torch.allclose(entropy.grad, torch.tensor([[-0.1, -0.1, 0], [-0.1, 0, 0]]) / 3)
    # the clipped tokens carry no policy gradient; the KL (k1) adds 0.5 / 3 at every valid one
    assert torch.allclose(log_probs.grad, torch.tensor([[-1 + 0.5, 0.5, 0], [0.5, 0, 0]]) / 3,
                          atol=1e-6)


def test_a_learning_only_bonus_skips_the_samples_without_an_advantage():
    """entropy_tokens "learning": the bonus counts the tokens of samples with a non-zero
    advantage only, in the same token-mean denominator; a micro batch whose advantages are
    all 0 gets no entropy gradient at all (alone, Adam would scale that bonus to full-size
    steps). The reported entropy is every token's either way."""
    log_probs, entropy, micro = tiny()
    micro["advantages"] = torch.tensor([[0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])   # sample 0: none
    cfg = loss_cfg(entropy_coeff=0.1, entropy_tokens="learning")
    _, parts = micro_batch_loss(log_probs, entropy, micro, cfg, torch.tensor(3), 1, 1)
    assert parts["actor/entropy"].item() == pytest.approx(2.0)      # (1 + 2 + 3) / 3
    bonus = objective.entropy_bonus(entropy, micro["advantages"], micro["response_mask"].float(),
                                    cfg)
    assert bonus.item() == pytest.approx(3.0 / 3)                  # sample 1's token only
    bonus.backward()
    assert torch.equal(entropy.grad, torch.tensor([[0.0, 0.0, 0.0], [1 / 3, 0.0, 0.0]]))
    entropy.grad = None
    micro["advantages"] = torch.zeros(2, 3)
    loss, _ = micro_batch_loss(log_probs, entropy, micro, cfg, torch.tensor(3), 1, 1)
    loss.backward()
    assert torch.count_nonzero(entropy.grad) == 0
    everyone = objective.entropy_bonus(entropy, micro["advantages"],
                                       micro["response_mask"].float(), loss_cfg())
    assert everyone.item() == pytest.approx(2.0)                   # "all": every token


def test_without_coefficients_entropy_is_reported_but_off_the_graph():
    log_probs, entropy, micro = tiny()
    loss, parts = micro_batch_loss(log_probs, entropy, micro, loss_cfg(), torch.tensor(3), 1, 1)
    assert loss.item() == pytest.approx(-0.2, abs=1e-6)
    assert parts["actor/entropy"].item() == pytest.approx(2.0)
    assert parts["actor/kl_loss"].item() == 0.0
    loss.backward()
    assert entropy.grad is None


def test_no_old_log_probs_means_on_policy_ratio_one():
    log_probs, entropy, micro = tiny()
    del micro["old_log_probs"]
    loss, parts = micro_batch_loss(log_probs, entropy, micro, loss_cfg(), torch.tensor(3), 1, 1)
    # ratio 1 everywhere: -(1 + 1 - 2) / 3 = 0, nothing clipped, ppo_kl 0
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    assert parts["actor/pg_clipfrac"].item() == 0.0 and parts["actor/ppo_kl"].item() == 0.0


def test_token_is_weights_and_the_rollout_diff():
    log_probs, entropy, micro = tiny()
    # old - rollout = 0, ln 3, ln 1.5: weights 1, min(3, 2) = 2 (capped), 1.5
    micro["rollout_log_probs"] = -torch.tensor([[0.0, LN(3), 0.0], [LN(1.5), 0.0, 0.0]])
    loss, parts = micro_batch_loss(log_probs, entropy, micro, loss_cfg(rollout_is="token"),
                                   torch.tensor(3), 1, 1)
    assert loss.item() == pytest.approx((-1 * 1 - 1.2 * 2 + 1.6 * 1.5) / 3, abs=1e-6)
    got = {k: v.item() for k, v in parts.items() if k.startswith("rollout/")}
    # |new - rollout|: 0, ln 1.5 + ln 3, |ln 0.5 + ln 1.5| (the padding's 9.0 masked out)
    assert got == pytest.approx({
        "rollout/is_weight_sum": 4.5, "rollout/is_count": 3.0, "rollout/is_capped_count": 1.0,
        "rollout/logprob_diff_sum": LN(4.5) + LN(4 / 3), "rollout/logprob_diff_count": 3.0,
        "rollout/logprob_diff_max": LN(4.5)}, abs=1e-6)


def test_is_weights_without_rollout_log_probs_name_the_key():
    log_probs, entropy, micro = tiny()
    with pytest.raises(ValueError, match="rl_config.rollout_is='token' needs"):
        micro_batch_loss(log_probs, entropy, micro, loss_cfg(rollout_is="token"), torch.tensor(3),
                         1, 1)


def test_dual_clip_and_policy_loss_come_from_the_config():
    log_probs, entropy, micro = tiny()
    # A = -2 at ratio 0.5 ... make it explode: ratio 4 gives max(8, 2.4) = 8 > 3 x 2 = 6
    with torch.no_grad():
        log_probs[1, 0] = LN(4.0)
    loss, _ = micro_batch_loss(log_probs, entropy, micro, loss_cfg(clip_ratio_c=3.0),
                               torch.tensor(3), 1, 1)
    assert loss.item() == pytest.approx((-1 - 1.2 + 6.0) / 3, abs=1e-6)
    with pytest.raises(ValueError, match="unknown policy loss 'gspo'"):
        micro_batch_loss(log_probs, entropy, micro, loss_cfg(policy_loss="gspo"), torch.tensor(3),
                         1, 1)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_and_ranks_add_up_to_the_mini_batch_loss(agg):
    """Split over micro batches and ranks, the schedule's sum / num_micro and DDP's average
    give the one-piece loss and metrics, for every aggregation."""
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(5) < torch.tensor([5, 2, 0, 3, 1])[:, None]).long()
    log_probs = -torch.rand(5, 5, generator=g)
    micro = {"response_mask": mask, "advantages": torch.randn(5, 5, generator=g),
             "old_log_probs": -torch.rand(5, 5, generator=g),
             "ref_log_probs": -torch.rand(5, 5, generator=g)}
    entropy = torch.rand(5, 5, generator=g)
    cfg = loss_cfg(loss_agg_mode=agg, use_kl_loss=True, kl_coef=0.3, entropy_coeff=0.05)
    weight = mini_batch_weight(mask.float(), agg)
    assert weight.item() == (11 if agg == "token-mean" else 4)   # tokens, or non-empty rows
    whole, whole_parts = micro_batch_loss(log_probs, entropy, micro, cfg, weight, 1, 1)
    # two ranks x two micro batches: rows [0, 1], [2], [3], [4]
    pieces = [[0, 1], [2], [3], [4]]
    losses, parts = [], []
    for rows in pieces:
        sub = {k: v[rows] for k, v in micro.items()}
        loss, p = micro_batch_loss(log_probs[rows], entropy[rows], sub, cfg, weight, 2, 2)
        losses.append(loss)
        parts.append(p)
    by_rank = [sum(losses[:2]) / 2, sum(losses[2:]) / 2]      # the schedule's mean per rank
    assert (sum(by_rank) / 2).item() == pytest.approx(whole.item(), abs=1e-6)   # DDP's mean
    summed = mini_batch_metrics(micro_batch_totals(parts, "cpu").tolist())
    one = mini_batch_metrics(micro_batch_totals([whole_parts], "cpu").tolist())
    # The losses are means in the aggregation's own weighting; clipfrac and ppo_kl are token
    # means weighted by that share, so they add up exactly under token-mean only.
    exact = [k for k in one if agg == "token-mean" or k in (
        "actor/pg_loss", "actor/kl_loss", "actor/entropy")]
    assert {k: summed[k] for k in exact} == pytest.approx({k: one[k] for k in exact}, abs=1e-6)
    assert len(exact) >= 3


def test_every_part_a_micro_batch_reports_is_in_the_table():
    log_probs, entropy, micro = tiny()
    micro["rollout_log_probs"] = micro["old_log_probs"]
    micro["teacher_log_probs"] = micro["ref_log_probs"]     # a teacher: the distill parts too
    _, parts = micro_batch_loss(log_probs, entropy, micro,
                                loss_cfg(rollout_is="sequence", distill_loss="reverse_kl"),
                                torch.tensor(3), 1, 1)
    assert set(parts) == set(SUMMED_PARTS) | set(MAXED_PARTS)
    assert len({m.key for m in METRICS}) == len(METRICS)


def test_totals_sum_or_max_each_part_and_skip_absent_ones():
    a = {"actor/pg_loss": torch.tensor(0.25), "rollout/logprob_diff_sum": torch.tensor(1.0),
         "rollout/logprob_diff_count": torch.tensor(4.0),
         "rollout/logprob_diff_max": torch.tensor(0.5)}
    b = {"actor/pg_loss": torch.tensor(-0.5), "rollout/logprob_diff_sum": torch.tensor(2.0),
         "rollout/logprob_diff_count": torch.tensor(2.0),
         "rollout/logprob_diff_max": torch.tensor(0.75)}
    vec = micro_batch_totals([a, b], "cpu")
    assert vec.dtype == torch.float32 and len(vec) == len(SUMMED_PARTS) + len(MAXED_PARTS)
    values = dict(zip(SUMMED_PARTS + MAXED_PARTS, vec.tolist()))
    assert values["actor/pg_loss"] == -0.25
    assert values["rollout/logprob_diff_max"] == 0.75
    assert values["rollout/is_count"] == 0.0
    # a pipeline stage before the last holds no micro batch results: all zeros
    assert micro_batch_totals([], "cpu").tolist() == [0.0] * len(vec)
    metrics = mini_batch_metrics(vec.tolist())
    # ratios of the sums (3 / 6 tokens), the max; IS metrics absent at count 0
    assert metrics == {"actor/pg_loss": -0.25, "actor/kl_loss": 0.0, "actor/entropy": 0.0,
                       "actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0,
                       "rollout/logprob_diff_mean": 0.5, "rollout/logprob_diff_max": 0.75}


def test_is_metrics_are_ratios_of_the_summed_counts():
    totals = dict.fromkeys(SUMMED_PARTS + MAXED_PARTS, 0.0)
    totals.update({"rollout/is_weight_sum": 6.0, "rollout/is_count": 8.0,
                   "rollout/is_capped_count": 2.0})
    metrics = mini_batch_metrics([totals[k] for k in SUMMED_PARTS + MAXED_PARTS])
    assert (metrics["rollout/is_weight_mean"], metrics["rollout/is_capped_fraction"],
            metrics["rollout/is_count"]) == (0.75, 0.25, 8.0)
    assert "rollout/logprob_diff_mean" not in metrics


def test_step_merge_means_firsts_and_pools():
    first = {"actor/pg_loss": 1.0, "actor/grad_norm": 2.0, "rollout/logprob_diff_mean": 0.1,
             "rollout/logprob_diff_max": 0.4, "rollout/is_weight_mean": 1.0,
             "rollout/is_capped_fraction": 0.5, "rollout/is_count": 2.0}
    second = {"actor/pg_loss": 3.0, "actor/grad_norm": 4.0, "rollout/logprob_diff_mean": 0.9,
              "rollout/logprob_diff_max": 0.8, "rollout/is_weight_mean": 2.0,
              "rollout/is_capped_fraction": 0.0, "rollout/is_count": 6.0}
    merged = merge_mini_batches([first, second])
    assert merged == {"actor/pg_loss": 2.0, "actor/grad_norm": 3.0,      # means (grad_norm:
                      "rollout/logprob_diff_mean": 0.1,                  # not in the table)
                      "rollout/logprob_diff_max": 0.4,                   # the first's
                      "rollout/is_weight_mean": (2 * 1.0 + 6 * 2.0) / 8,  # pooled by count
                      "rollout/is_capped_fraction": (2 * 0.5) / 8}
    assert list(merged)[:2] == ["actor/pg_loss", "actor/grad_norm"]


def test_the_table_names_only_known_reductions():
    for m in METRICS:
        assert m.reduce in (objective.SUM, objective.MAX, objective.RATIO), m
        assert m.merge in (objective.MEAN, objective.FIRST, objective.POOLED,
                           objective.DROP), m
        assert len(m.sources) == (2 if m.reduce == objective.RATIO else 1), m
        assert m.when is None or m.when in SUMMED_PARTS, m
        assert m.merge != objective.POOLED or m.when is not None, m
