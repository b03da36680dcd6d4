"""Advantage estimators and reward helpers against hand-computed tables (float64)."""

import math

import pytest
import torch

from mindrl.algorithms import (
    apply_kl_penalty,
    compute_advantages,
    discounted_returns,
    gae_advantages,
    group_norm_advantages,
    reinforce_plus_plus_advantages,
    rloo_advantages,
    scores_to_token_rewards,
)

F64 = torch.float64
EPS = 1e-6


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- group_norm / rloo

# 8 samples, groups in no particular order:
#   group 7 -> samples 0, 2, 5: rewards 1.0, 0.0, 0.5  (mean 0.5, unbiased std 0.5)
#   group 3 -> samples 1, 4, 6: rewards 0.1, 0.1, 0.1  (all equal; float mean is 0.10000000000000002)
#   group 9 -> sample 3 alone:  reward 0.7
#   group 0 -> sample 7 alone:  reward -2.0
SCORES = torch.tensor([1.0, 0.1, 0.0, 0.7, 0.1, 0.5, 0.1, -2.0], dtype=F64)
GROUP_ID = torch.tensor([7, 3, 7, 9, 3, 7, 3, 0])
MASK_8x3 = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1],
                         [0, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])


def test_group_norm_grpo_table():
    adv, returns = group_norm_advantages(scores=SCORES, group_id=GROUP_ID,
                                         response_mask=MASK_8x3, eps=EPS)
    a = 0.5 / (0.5 + EPS)  # (1.0 - 0.5) / (0.5 + eps)
    close(adv, [[a, a, a], [0, 0, 0], [-a, 0, 0], [0, 0, 0],
                [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    assert torch.equal(returns, adv)


def test_group_norm_equal_rewards_and_singletons_are_exact_zero_not_nan():
    adv, _ = group_norm_advantages(scores=SCORES, group_id=GROUP_ID, response_mask=MASK_8x3)
    assert not torch.isnan(adv).any()
    for sample in (1, 3, 4, 6, 7):  # equal-reward group 3, singletons 9 and 0
        assert torch.count_nonzero(adv[sample]) == 0


def test_group_norm_unbiased_std_group_of_two():
    # rewards 3, 1: mean 2, unbiased std sqrt(((1)^2 + (1)^2) / 1) = sqrt(2)
    adv, _ = group_norm_advantages(scores=torch.tensor([3.0, 1.0], dtype=F64),
                                   group_id=torch.tensor([5, 5]),
                                   response_mask=torch.ones(2, 2), eps=EPS)
    a = 1 / (math.sqrt(2) + EPS)
    close(adv, [[a, a], [-a, -a]])


def test_group_norm_dr_grpo_skips_std_division():
    adv, _ = group_norm_advantages(scores=SCORES, group_id=GROUP_ID, response_mask=MASK_8x3,
                                   norm_by_std=False)
    close(adv, [[0.5, 0.5, 0.5], [0, 0, 0], [-0.5, 0, 0], [0, 0, 0],
                [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])


def test_group_norm_does_not_depend_on_group_order():
    perm = torch.tensor([5, 0, 7, 3, 1, 6, 2, 4])
    adv, _ = group_norm_advantages(scores=SCORES, group_id=GROUP_ID, response_mask=MASK_8x3)
    adv_perm, _ = group_norm_advantages(scores=SCORES[perm], group_id=GROUP_ID[perm],
                                        response_mask=MASK_8x3[perm])
    torch.testing.assert_close(adv_perm, adv[perm], atol=1e-12, rtol=0)


def test_group_norm_int_scores_and_list_group_id():
    adv, _ = group_norm_advantages(scores=torch.tensor([1, 0]), group_id=[2, 2],
                                   response_mask=torch.ones(2, 1), eps=0.0)
    # mean 0.5, unbiased std sqrt(0.5)
    expected = 0.5 / math.sqrt(0.5)
    torch.testing.assert_close(adv.double(), torch.tensor([[expected], [-expected]], dtype=F64),
                               atol=1e-6, rtol=0)


def test_rloo_group_of_three_and_degenerate_groups():
    # group 7: r = 1.0, 0.0, 0.5 -> baselines (0.0+0.5)/2, (1.0+0.5)/2, (1.0+0.0)/2
    adv, returns = rloo_advantages(scores=SCORES, group_id=GROUP_ID, response_mask=MASK_8x3)
    close(adv, [[0.75, 0.75, 0.75], [0, 0, 0], [-0.75, 0, 0], [0, 0, 0],
                [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    assert torch.equal(returns, adv)


@pytest.mark.parametrize("estimator", [group_norm_advantages, rloo_advantages])
def test_outcome_estimators_need_group_id_and_scores(estimator):
    with pytest.raises(ValueError, match="group_id"):
        estimator(scores=SCORES, response_mask=MASK_8x3)
    with pytest.raises(ValueError, match="scores"):
        estimator(group_id=GROUP_ID, response_mask=MASK_8x3)
    with pytest.raises(ValueError, match="group_id has shape"):
        estimator(scores=SCORES, group_id=GROUP_ID[:3], response_mask=MASK_8x3)


# --------------------------------------------------------------------------- reward helpers

MASK_3x4 = torch.tensor([[1, 1, 1, 0],
                         [1, 1, 1, 1],
                         [0, 0, 0, 0]])


def test_scores_to_token_rewards_puts_score_on_last_valid_token():
    rewards = scores_to_token_rewards(torch.tensor([2.0, -1.0, 5.0], dtype=F64), MASK_3x4)
    close(rewards, [[0, 0, 2.0, 0], [0, 0, 0, -1.0], [0, 0, 0, 0]])
    holey = scores_to_token_rewards(torch.tensor([3.0], dtype=F64), torch.tensor([[1, 0, 1, 0]]))
    close(holey, [[0, 0, 3.0, 0]])


def test_apply_kl_penalty_k1_and_k2():
    rewards = torch.tensor([[0, 0, 2.0, 9.0], [0, 0, 0, -1.0], [0, 0, 0, 0]], dtype=F64)
    log_probs = torch.tensor([[-1.0, -2.0, -0.5, 0.0]] * 3, dtype=F64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5, -3.0]] * 3, dtype=F64)
    # k1 = logp - ref = [0.5, -1.0, 0.0, 3.0]; reward - 0.1 * k1, padding -> 0
    out = apply_kl_penalty(rewards, log_probs, ref, 0.1, "kl", MASK_3x4)
    close(out, [[-0.05, 0.1, 2.0, 0], [-0.05, 0.1, 0.0, -1.3], [0, 0, 0, 0]])
    assert not out.requires_grad
    # k2 = 0.5 * (logp - ref)^2 = [0.125, 0.5, 0, 4.5]
    out = apply_kl_penalty(rewards, log_probs, ref, 0.1, "mse", MASK_3x4)
    close(out, [[-0.0125, -0.05, 2.0, 0], [-0.0125, -0.05, 0.0, -1.45], [0, 0, 0, 0]])
    assert torch.equal(rewards[0, 3], torch.tensor(9.0, dtype=F64))  # input untouched


# --------------------------------------------------------------------------- REINFORCE++

# gamma = 0.5; garbage (9, 7) sits in padding and must not leak.
RPP_REWARDS = torch.tensor([[0.0, 0.0, 0.0, 1.0],
                            [0.5, 0.0, 2.0, 9.0],
                            [1.0, -1.0, 7.0, 7.0]], dtype=F64)
RPP_MASK = torch.tensor([[1, 1, 1, 1],
                         [1, 1, 1, 0],
                         [1, 1, 0, 0]])
# row 0: 1 -> 0.5 -> 0.25 -> 0.125 going back
# row 1: t2 = 2, t1 = 0 + 0.5*2 = 1, t0 = 0.5 + 0.5*1 = 1
# row 2: t1 = -1, t0 = 1 + 0.5*(-1) = 0.5
RPP_RETURNS = [[0.125, 0.25, 0.5, 1.0], [1.0, 1.0, 2.0, 0.0], [0.5, -1.0, 0.0, 0.0]]


def test_discounted_returns_gamma_half():
    close(discounted_returns(RPP_REWARDS, RPP_MASK, gamma=0.5), RPP_RETURNS)


def test_discounted_returns_skip_masked_hole_and_gamma_one():
    rewards = torch.tensor([[0.0, 5.0, 1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 0, 1, 0]])
    close(discounted_returns(rewards, mask, gamma=0.5), [[0.5, 0.0, 1.0, 0.0]])
    close(discounted_returns(rewards, mask, gamma=1.0), [[1.0, 0.0, 1.0, 0.0]])
    close(discounted_returns(RPP_REWARDS, RPP_MASK, gamma=1.0),
          [[1.0, 1.0, 1.0, 1.0], [2.5, 2.0, 2.0, 0.0], [0.0, -1.0, 0.0, 0.0]])


def test_reinforce_plus_plus_whitens_over_all_valid_tokens():
    adv, returns = reinforce_plus_plus_advantages(token_rewards=RPP_REWARDS,
                                                  response_mask=RPP_MASK, gamma=0.5, eps=EPS)
    close(returns, RPP_RETURNS)
    # 9 valid returns: mean 0.5972222222222222, unbiased var 0.6710069444444444,
    # advantage = (G - mean) / sqrt(var + 1e-6)
    close(adv, [[-0.5764778029054238, -0.4238807374304587, -0.11868660648052841,
                 0.4917016554193321],
                [0.4917016554193321, 0.4917016554193321, 1.7124781792190529, 0.0],
                [-0.11868660648052841, -1.94985139218011, 0.0, 0.0]])


def test_reinforce_plus_plus_from_scores_when_no_token_rewards():
    adv, returns = reinforce_plus_plus_advantages(
        scores=torch.tensor([1.0, 3.0], dtype=F64),
        response_mask=torch.tensor([[1, 1], [1, 0]]), gamma=0.5, eps=0.0)
    close(returns, [[0.5, 1.0], [3.0, 0.0]])
    # mean 1.5, unbiased var (1 + 0.25 + 2.25) / 2 = 1.75
    s = math.sqrt(1.75)
    close(adv, [[-1.0 / s, -0.5 / s], [1.5 / s, 0.0]])


# --------------------------------------------------------------------------- GAE

# gamma = 0.9, lam = 0.8 (gamma * lam = 0.72); 99 / 9 in padding must not leak.
GAE_REWARDS = torch.tensor([[0.0, 0.0, 1.0, 5.0],
                            [0.0, 2.0, 0.0, 0.0],
                            [1.0, 9.0, 0.5, 0.0]], dtype=F64)
GAE_VALUES = torch.tensor([[0.5, 0.4, 0.2, 99.0],
                           [1.0, -1.0, 7.0, 7.0],
                           [0.3, 99.0, 0.6, 0.1]], dtype=F64)
GAE_MASK = torch.tensor([[1, 1, 1, 0],
                         [1, 1, 0, 0],
                         [1, 0, 1, 1]])  # row 2 has a hole at t=1
# row 0: t2 d = 1 - 0.2 = 0.8, A = 0.8
#        t1 d = 0.9*0.2 - 0.4 = -0.22, A = -0.22 + 0.72*0.8 = 0.356
#        t0 d = 0.9*0.4 - 0.5 = -0.14, A = -0.14 + 0.72*0.356 = 0.11632
# row 1: t1 d = 2 - (-1) = 3, A = 3;  t0 d = 0.9*(-1) - 1 = -1.9, A = -1.9 + 2.16 = 0.26
# row 2: t3 d = -0.1, A = -0.1;  t2 d = 0.5 + 0.09 - 0.6 = -0.01, A = -0.01 - 0.072 = -0.082
#        t1 skipped;  t0 d = 1 + 0.9*0.6 - 0.3 = 1.24, A = 1.24 + 0.72*(-0.082) = 1.18096
GAE_RAW = [[0.11632, 0.356, 0.8, 0.0], [0.26, 3.0, 0.0, 0.0], [1.18096, 0.0, -0.082, -0.1]]


def test_gae_recursion_with_padding_and_hole():
    adv, returns = gae_advantages(token_rewards=GAE_REWARDS, values=GAE_VALUES,
                                  response_mask=GAE_MASK, gamma=0.9, lam=0.8, eps=EPS)
    # returns = raw A + V at valid tokens
    close(returns, [[0.61632, 0.756, 1.0, 0.0], [1.26, 2.0, 0.0, 0.0],
                    [1.48096, 0.0, 0.518, 0.0]])
    # policy advantages: raw A whitened over the 8 valid tokens (unbiased var, eps 1e-6)
    close(adv, [[-0.5580174866693148, -0.32545279035238817, 0.1053663233188212, 0.0],
                [-0.4186028689840009, 2.240055625293282, 0.0, 0.0],
                [0.4750168853552715, 0.0, -0.750450024109122, -0.7679156638525493]])


def test_gae_lam_one_gamma_one_is_return_minus_value():
    rewards = torch.tensor([[0.0, 1.0, 0.0]], dtype=F64)
    values = torch.tensor([[0.25, 0.5, 3.0]], dtype=F64)
    _, returns = gae_advantages(token_rewards=rewards, values=values,
                                response_mask=torch.tensor([[1, 1, 0]]), gamma=1.0, lam=1.0)
    close(returns, [[1.0, 1.0, 0.0]])  # Monte-Carlo return when lam = 1


def test_gae_needs_values():
    with pytest.raises(ValueError, match="values"):
        gae_advantages(token_rewards=GAE_REWARDS, response_mask=GAE_MASK)


# --------------------------------------------------------------------------- dispatch


def test_compute_advantages_dispatches_by_name():
    adv, _ = compute_advantages("rloo", scores=SCORES, group_id=GROUP_ID,
                                response_mask=MASK_8x3, values=None, token_rewards=None,
                                gamma=1.0, lam=1.0, eps=EPS, norm_by_std=True)
    assert adv[0, 0].item() == pytest.approx(0.75, abs=1e-12)
