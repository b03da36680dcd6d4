"""entropy_from_logits and the entropy bonus against hand-computed values."""

import math

import pytest
import torch

from mindrl.algorithms import entropy_bonus, entropy_from_logits

F64 = torch.float64

# H(softmax([1, 2, 3])) = -sum p log p = 0.8323955818399389
# H(softmax([0.5, -1, 0])) = 0.9528075640133673
# H(uniform over 3) = log 3 = 1.0986122886681098;  one-hot-ish [1000, 0, 0] -> ~0
LOGITS = torch.tensor([[[1.0, 2.0, 3.0], [0.5, -1.0, 0.0], [7.0, 7.0, 7.0], [1000.0, 0.0, 0.0]],
                       [[3.0, 2.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.5, -1.0], [-1e4, 0.0, -1e4]],
                       [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]],
                      dtype=F64)
H123, H_MIXED, LOG3 = 0.8323955818399389, 0.9528075640133673, 1.0986122886681098
ENTROPY = [[H123, H_MIXED, LOG3, 0.0],
           [H123, LOG3, H_MIXED, 0.0],
           [LOG3, H123, H123, H123]]


def test_entropy_table_on_3x4_tokens():
    torch.testing.assert_close(entropy_from_logits(LOGITS), torch.tensor(ENTROPY, dtype=F64),
                               atol=1e-12, rtol=0)


def test_entropy_is_stable_for_extreme_logits_in_float32():
    logits = torch.tensor([[1e4, -1e4, 0.0], [-3e38, 0.0, 0.0]], dtype=torch.float32)
    entropy = entropy_from_logits(logits)
    assert torch.isfinite(entropy).all()
    assert entropy[0].item() == pytest.approx(0.0, abs=1e-6)
    assert entropy[1].item() == pytest.approx(math.log(2), abs=1e-6)


def test_entropy_bonus_is_masked_mean():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    expected = (H123 + H_MIXED + H123) / 3
    assert entropy_bonus(torch.tensor(ENTROPY, dtype=F64), mask).item() == pytest.approx(
        expected, abs=1e-12)
    assert entropy_bonus(torch.tensor(ENTROPY, dtype=F64), torch.zeros(3, 4)).item() == 0.0


def test_entropy_gradient_is_finite():
    logits = LOGITS.clone().requires_grad_(True)
    entropy_bonus(entropy_from_logits(logits), torch.ones(3, 4)).backward()
    assert torch.isfinite(logits.grad).all()
    # uniform logits are a maximum of entropy: zero gradient there
    torch.testing.assert_close(logits.grad[0, 2], torch.zeros(3, dtype=F64), atol=1e-12, rtol=0)


def test_entropy_coeff_schedule_decays_linearly_then_holds():
    from mindrl.algorithms import entropy_coeff_at

    at = [entropy_coeff_at(step, 0.05, 0.0, 4) for step in (1, 2, 3, 4, 5, 6, 400)]
    assert at == pytest.approx([0.05, 0.0375, 0.025, 0.0125, 0.0, 0.0, 0.0])
    assert entropy_coeff_at(3, 0.01, 0.03, 2) == pytest.approx(0.03)   # it may rise too
    # constant unless both ends of the schedule are given
    assert entropy_coeff_at(300, 0.02) == 0.02
    assert entropy_coeff_at(300, 0.02, 0.0, 0) == 0.02
