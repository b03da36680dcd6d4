"""PPO clipped surrogate: clip boundaries, clip-higher, dual clip, IS weights, gradients.

Tokens are built with old_log_probs = 0 and log_probs = log(ratio), so each token's ratio
is the number written in the table. Per-token losses follow by hand from
max(-A r, -A clamp(r, 1 - low, 1 + high)), then min(., -A c) for A < 0 with dual clip.
"""

import math

import pytest
import torch

from mindrl.algorithms import POLICY_LOSSES, get_policy_loss, ppo_clip_loss, truncated_is_weight

F64 = torch.float64


def leaf_log_probs(ratios):
    return torch.tensor([[math.log(r) for r in row] for row in ratios], dtype=F64,
                        requires_grad=True)


def table(rows):
    return torch.tensor(rows, dtype=F64)


def close(actual, expected, tol=1e-9):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=F64), atol=tol, rtol=0)


# clip_ratio 0.2 -> ratio clipped to [0.8, 1.2]
SYM_RATIOS = [[1.0, 1.3, 1.3],
              [0.7, 0.7, 1.199],
              [1.201, 0.801, 0.799]]
SYM_ADV = [[1.0, 1.0, -1.0],
           [-1.0, 1.0, 1.0],
           [1.0, -1.0, -1.0]]
# per-token loss and whether the clipped branch is active:
#   r=1.0  A=+1: -1.0                 r=1.3  A=+1: -1.2 (clip)   r=1.3  A=-1: 1.3 (pessimistic)
#   r=0.7  A=-1: 0.8 (clip)           r=0.7  A=+1: -0.7          r=1.199 A=+1: -1.199
#   r=1.201 A=+1: -1.2 (clip)         r=0.801 A=-1: 0.801        r=0.799 A=-1: 0.8 (clip)
SYM_LOSS = [[-1.0, -1.2, 1.3], [0.8, -0.7, -1.199], [-1.2, 0.801, 0.8]]
# d(-A r)/d log r = -A r where unclipped is active, 0 where the clip is active; token-mean / 9
SYM_GRAD = [[-1.0 / 9, 0.0, 1.3 / 9], [0.0, -0.7 / 9, -1.199 / 9], [0.0, 0.801 / 9, 0.0]]


def test_symmetric_clip_table_loss_stats_and_gradient():
    log_probs = leaf_log_probs(SYM_RATIOS)
    loss, stats = ppo_clip_loss(log_probs, torch.zeros(3, 3, dtype=F64), table(SYM_ADV),
                                torch.ones(3, 3), clip_ratio=0.2)
    close(loss, sum(map(sum, SYM_LOSS)) / 9)  # -1.598 / 9
    assert stats["pg_clipfrac"].item() == pytest.approx(4 / 9, abs=1e-12)
    assert stats["pg_clipfrac_lower"].item() == 0.0
    # ppo_kl = mean(old - new) = -mean(log r)
    close(stats["ppo_kl"], -sum(math.log(r) for row in SYM_RATIOS for r in row) / 9)
    loss.backward()
    close(log_probs.grad, SYM_GRAD)


def test_clip_boundary_exact_just_inside_just_outside():
    # Bounds are taken from torch's own exp of the boundary tokens, so ratio == 1 +- eps
    # holds bit for bit: (r - 1) and 1 - (1 - r) are exact for r in [0.5, 2] (Sterbenz).
    x_hi, x_lo, tiny = 0.18, -0.22, 1e-9
    log_probs = torch.tensor([[x_hi, x_hi - tiny, x_hi + tiny],
                              [x_lo, x_lo + tiny, x_lo - tiny]], dtype=F64, requires_grad=True)
    ratio = torch.exp(log_probs.detach())
    r_hi, r_lo = ratio[0, 0].item(), ratio[1, 0].item()
    advantages = table([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    loss, stats = ppo_clip_loss(log_probs, torch.zeros(2, 3, dtype=F64), advantages,
                                torch.ones(2, 3), clip_ratio_low=1.0 - r_lo,
                                clip_ratio_high=r_hi - 1.0)
    # exactly on the bound and just inside: not clipped; just outside: clipped
    assert stats["pg_clipfrac"].item() == pytest.approx(2 / 6, abs=1e-12)
    close(loss, (-r_hi - r_hi - r_hi + r_lo + r_lo + r_lo) / 6, tol=1e-8)
    loss.backward()
    # on the bound both branches agree and the gradient still flows (clamp is inclusive)
    close(log_probs.grad, [[-r_hi / 6, -r_hi / 6, 0.0], [r_lo / 6, r_lo / 6, 0.0]], tol=1e-8)


def test_asymmetric_clip_higher():
    ratios = [[1.25, 1.3, 0.75, 0.75]]
    advantages = table([[1.0, 1.0, -1.0, 1.0]])
    # [0.8, 1.28]: 1.25 A+ -> -1.25 free; 1.3 A+ -> -1.28 clip; 0.75 A- -> 0.8 clip; 0.75 A+ -> -0.75
    log_probs = leaf_log_probs(ratios)
    loss, stats = ppo_clip_loss(log_probs, torch.zeros(1, 4, dtype=F64), advantages,
                                torch.ones(1, 4), clip_ratio=0.2, clip_ratio_high=0.28)
    close(loss, (-1.25 - 1.28 + 0.8 - 0.75) / 4)
    assert stats["pg_clipfrac"].item() == pytest.approx(2 / 4, abs=1e-12)
    loss.backward()
    close(log_probs.grad, [[-1.25 / 4, 0.0, 0.0, -0.75 / 4]])
    # the symmetric 0.2 clip would also have clipped r = 1.25
    _, symmetric = ppo_clip_loss(log_probs.detach(), torch.zeros(1, 4, dtype=F64), advantages,
                                 torch.ones(1, 4), clip_ratio=0.2)
    assert symmetric["pg_clipfrac"].item() == pytest.approx(3 / 4, abs=1e-12)


def test_dual_clip_caps_negative_advantages_only():
    ratios = [[4.0, 2.5, 4.0], [5.0, 0.5, 1.0]]
    advantages = table([[-1.0, -1.0, 1.0], [-2.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # c = 3, clip 0.2:
    #   r=4   A=-1: max(4, 1.2) = 4 > cap 3 -> 3 (dual)      r=2.5 A=-1: 2.5 < 3 -> 2.5
    #   r=4   A=+1: -1.2 (clip; dual clip ignores A > 0)    r=5   A=-2: max(10, 2.4) -> cap 6 (dual)
    #   r=0.5 A=-1: 0.8 (clip)                              padding
    log_probs = leaf_log_probs(ratios)
    loss, stats = ppo_clip_loss(log_probs, torch.zeros(2, 3, dtype=F64), advantages, mask,
                                clip_ratio=0.2, clip_ratio_c=3.0)
    close(loss, (3.0 + 2.5 - 1.2 + 6.0 + 0.8) / 5)
    assert stats["pg_clipfrac_lower"].item() == pytest.approx(2 / 5, abs=1e-12)
    assert stats["pg_clipfrac"].item() == pytest.approx(2 / 5, abs=1e-12)
    loss.backward()
    close(log_probs.grad, [[0.0, 2.5 / 5, 0.0], [0.0, 0.0, 0.0]])


def test_dual_clip_constant_must_exceed_one():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_clip_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1),
                      clip_ratio_c=1.0)


def test_is_weights_scale_per_token_loss_and_gradient():
    log_probs = leaf_log_probs([[1.0, 1.1, 1.3]])
    advantages = table([[1.0, -1.0, 1.0]])
    weights = table([[0.5, 2.0, 1.0]])
    # unweighted: -1.0, 1.1, -1.2 (clip)
    loss, _ = ppo_clip_loss(log_probs, torch.zeros(1, 3, dtype=F64), advantages,
                            torch.ones(1, 3), is_weights=weights)
    close(loss, (-0.5 + 2.2 - 1.2) / 3)
    loss.backward()
    close(log_probs.grad, [[-0.5 / 3, 2.2 / 3, 0.0]])


def test_truncated_is_weight_plugs_into_the_loss():
    old = table([[0.0, 0.0, 0.0]])
    rollout = table([[0.0, -math.log(1.5), -math.log(3.0)]])  # old - rollout: 0, log 1.5, log 3
    weights = truncated_is_weight(old, rollout, torch.ones(1, 3), cap=2.0)  # 1, 1.5, 2 (capped)
    loss, _ = ppo_clip_loss(old.clone(), old, table([[1.0, 1.0, 1.0]]), torch.ones(1, 3),
                            is_weights=weights)
    close(loss, -(1.0 + 1.5 + 2.0) / 3)


def test_seq_mean_token_sum_mode():
    log_probs = leaf_log_probs([[1.0, 1.0, 1.0], [1.3, 1.0, 1.0]])
    advantages = table([[1.0, 2.0, 3.0], [1.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # row 0: -(1 + 2 + 3) = -6 ; row 1: -1.2 (clipped) -> mean over 2 sequences
    loss, _ = ppo_clip_loss(log_probs, torch.zeros(2, 3, dtype=F64), advantages, mask,
                            loss_agg_mode="seq-mean-token-sum")
    close(loss, (-6.0 - 1.2) / 2)


def test_all_masked_rows_and_garbage_padding_stay_finite():
    nan, inf = float("nan"), float("inf")
    log_probs = torch.tensor([[math.log(1.1), nan, -inf], [inf, nan, 0.0]], dtype=F64,
                             requires_grad=True)
    old = table([[0.0, 5.0, nan], [0.0, -inf, nan]])
    advantages = table([[2.0, nan, inf], [nan, 1.0, 1.0]])
    weights = table([[1.0, nan, nan], [nan, inf, 1.0]])
    mask = torch.tensor([[1, 0, 0], [0, 0, 0]])  # row 1 fully masked
    loss, stats = ppo_clip_loss(log_probs, old, advantages, mask, is_weights=weights,
                                loss_agg_mode="seq-mean-token-mean")
    close(loss, -2.0 * 1.1)
    loss.backward()
    close(log_probs.grad, [[-2.0 * 1.1, 0.0, 0.0], [0.0, 0.0, 0.0]])
    for value in stats.values():
        assert torch.isfinite(value)


def test_all_masked_batch_gives_zero_loss_and_stats():
    log_probs = leaf_log_probs([[1.5, 0.5], [1.0, 2.0]])
    loss, stats = ppo_clip_loss(log_probs, torch.zeros(2, 2, dtype=F64), table([[1, -1], [1, 1]]),
                                torch.zeros(2, 2))
    loss.backward()
    assert loss.item() == 0.0
    assert all(v.item() == 0.0 for v in stats.values())
    assert torch.equal(log_probs.grad, torch.zeros(2, 2, dtype=F64))


def test_policy_loss_registry():
    assert get_policy_loss("ppo_clip") is ppo_clip_loss
    assert "ppo_clip" in POLICY_LOSSES
    with pytest.raises(ValueError, match="ppo_clip"):
        get_policy_loss("gspo")
