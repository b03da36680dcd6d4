"""Rollout correction (rl_config.rollout_is): truncated IS weights in token and sequence
mode against a hand-computed 2 x 4 table, and the weighted policy loss they feed."""

import math

import pytest
import torch

from mindrl.algorithms import (ROLLOUT_CORRECTIONS, get_rollout_correction, ppo_clip_loss,
                               rollout_is_weights)

F64 = torch.float64
NAN = float("nan")

# old - rollout per token; row 1 has two padding tokens holding garbage (NaN, 50).
#   row 0: ratios 1, 1.5, 3 (-> capped at 2), 0.5       product 2.25 (-> capped at 2)
#   row 1: ratios 1.2, 0.8, pad, pad                    product 0.96
LOG_RATIO = [[0.0, math.log(1.5), math.log(3.0), -math.log(2.0)],
             [math.log(1.2), math.log(0.8), NAN, 50.0]]
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
CAP = 2.0


def _inputs():
    rollout = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.7, -1.1, -2.0, -4.0]], dtype=F64)
    old = rollout + torch.tensor(LOG_RATIO, dtype=F64)
    return old, rollout


def test_token_mode_table():
    old, rollout = _inputs()
    weights, stats = rollout_is_weights("token", old, rollout, MASK, CAP)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.5, 2.0, 0.5],
                                                      [1.2, 0.8, 0.0, 0.0]], dtype=F64),
                               atol=1e-12, rtol=0)
    # 6 valid tokens, weights summing to 7, one capped (the 3)
    assert stats["weight_sum"].item() == pytest.approx(7.0, abs=1e-12)
    assert stats["count"].item() == 6 and stats["capped"].item() == 1


def test_sequence_mode_table():
    old, rollout = _inputs()
    weights, stats = rollout_is_weights("sequence", old, rollout, MASK, CAP)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0, 2.0, 2.0],
                                                      [0.96, 0.96, 0.0, 0.0]], dtype=F64),
                               atol=1e-12, rtol=0)
    assert stats["weight_sum"].item() == pytest.approx(2.96, abs=1e-12)
    assert stats["count"].item() == 2 and stats["capped"].item() == 1   # row 0 (2.25 > 2)


def test_sequence_mode_leaves_empty_samples_out():
    old, rollout = _inputs()
    mask = torch.cat([MASK, torch.zeros(1, 4, dtype=MASK.dtype)])
    old = torch.cat([old, torch.full((1, 4), 30.0, dtype=F64)])
    rollout = torch.cat([rollout, torch.zeros(1, 4, dtype=F64)])
    weights, stats = rollout_is_weights("sequence", old, rollout, mask, CAP)
    assert weights[2].abs().sum() == 0
    assert stats["count"].item() == 2 and stats["capped"].item() == 1
    assert stats["weight_sum"].item() == pytest.approx(2.96, abs=1e-12)


def test_off_gives_no_weights_and_weights_are_detached():
    old, rollout = _inputs()
    assert rollout_is_weights("off", old, rollout, MASK, CAP) == (None, {})
    old.requires_grad_(True)
    for mode in ("token", "sequence"):
        weights, _ = rollout_is_weights(mode, old, rollout, MASK, CAP)
        assert not weights.requires_grad


def test_cap_of_one_or_less_is_refused_and_names_are_the_registry():
    old, rollout = _inputs()
    for mode in ("token", "sequence"):
        with pytest.raises(ValueError, match="cap must be > 1"):
            rollout_is_weights(mode, old, rollout, MASK, 1.0)
    assert set(ROLLOUT_CORRECTIONS) == {"off", "token", "sequence"}
    with pytest.raises(ValueError, match="known: off, sequence, token"):
        get_rollout_correction("tis")


@pytest.mark.parametrize("mode,expected_weights", [
    ("token", [[1.0, 1.5, 2.0, 0.5], [1.2, 0.8, 0.0, 0.0]]),
    ("sequence", [[2.0, 2.0, 2.0, 2.0], [0.96, 0.96, 0.0, 0.0]]),
])
def test_weights_multiply_the_policy_gradient_term(mode, expected_weights):
    """On policy (ratio 1, no clip): per-token loss -A * w, token-mean over 6 tokens, and
    d loss / d logp_t = -A_t w_t / 6."""
    old, rollout = _inputs()
    advantages = torch.tensor([[1.0] * 4, [-2.0] * 4], dtype=F64)
    logp = old.clone().requires_grad_(True)
    weights, _ = rollout_is_weights(mode, old, rollout, MASK, CAP)
    loss, _ = ppo_clip_loss(logp, old, advantages, MASK, is_weights=weights)
    w = torch.tensor(expected_weights, dtype=F64)
    expected = -(advantages * w * MASK).sum() / 6
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    # token: -(1 * 5 - 2 * 2) / 6 = -1/6; sequence: -(1 * 8 - 2 * 1.92) / 6
    assert loss.item() == pytest.approx({"token": -1 / 6, "sequence": -(8 - 3.84) / 6}[mode],
                                        abs=1e-12)
    loss.backward()
    torch.testing.assert_close(logp.grad, -advantages * w * MASK / 6, atol=1e-12, rtol=0)
