"""KL estimators (k1, k2, k3, abs) and kl_loss against hand-computed values."""

import pytest
import torch

from mindrl.algorithms import KL_ESTIMATORS, get_kl_estimator, kl_loss, token_kl

F64 = torch.float64

# log ratio logp - ref per column: 0.5, -1.0, 0.0, 3.0
LOG_PROBS = torch.tensor([[-1.0, -2.0, -0.5, 0.0]] * 3, dtype=F64)
REF = torch.tensor([[-1.5, -1.0, -0.5, -3.0]] * 3, dtype=F64)

# k3 = exp(ref - logp) - (ref - logp) - 1 with ref - logp = -0.5, 1.0, 0.0, -3.0:
#   exp(-0.5) + 0.5 - 1 = 0.10653065971263342,  e - 2 = 0.7182818284590451,  0,
#   exp(-3) + 3 - 1 = 2.049787068367864
ROW_BY_ESTIMATOR = {
    "kl": [0.5, -1.0, 0.0, 3.0],
    "mse": [0.125, 0.5, 0.0, 4.5],
    "low_var_kl": [0.10653065971263342, 0.7182818284590451, 0.0, 2.049787068367864],
    "abs": [0.5, 1.0, 0.0, 3.0],
}


@pytest.mark.parametrize("name", sorted(ROW_BY_ESTIMATOR))
def test_estimator_table(name):
    expected = torch.tensor([ROW_BY_ESTIMATOR[name]] * 3, dtype=F64)
    torch.testing.assert_close(token_kl(LOG_PROBS, REF, name), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("alias,name", [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_schulman_aliases(alias, name):
    assert get_kl_estimator(alias) is get_kl_estimator(name)


def test_k3_clamps_log_ratio_and_value():
    # ref - logp = +30 -> clamped to 20 -> exp(20) - 21 -> clamped to 10
    # ref - logp = -30 -> clamped to -20 -> exp(-20) + 19 -> clamped to 10
    # ref - logp = 2   -> e^2 - 3 = 4.38905609893065 (inside both clamps)
    logp = torch.tensor([-40.0, 0.0, -2.0], dtype=F64)
    ref = torch.tensor([-10.0, -30.0, 0.0], dtype=F64)
    torch.testing.assert_close(token_kl(logp, ref, "low_var_kl"),
                               torch.tensor([10.0, 10.0, 4.38905609893065], dtype=F64),
                               atol=1e-12, rtol=0)
    huge = token_kl(torch.tensor([-1e4]), torch.tensor([0.0]), "low_var_kl")
    assert torch.isfinite(huge).all()


def test_kl_loss_aggregates_over_valid_tokens():
    mask = torch.tensor([[1, 1, 1, 0],
                         [1, 0, 0, 0],
                         [0, 0, 0, 0]])
    # k1 valid: row 0 -> 0.5, -1, 0 ; row 1 -> 0.5
    assert kl_loss(LOG_PROBS, REF, mask, "kl", "token-mean").item() == pytest.approx(0.0, abs=1e-12)
    assert kl_loss(LOG_PROBS, REF, mask, "abs", "token-mean").item() == pytest.approx(2.0 / 4, abs=1e-12)
    # seq-mean-token-mean of k2: row 0 (0.125 + 0.5 + 0) / 3, row 1 0.125 -> mean of the two
    assert kl_loss(LOG_PROBS, REF, mask, "mse", "seq-mean-token-mean").item() == pytest.approx(
        (0.625 / 3 + 0.125) / 2, abs=1e-12)
    assert kl_loss(LOG_PROBS, REF, torch.zeros(3, 4), "low_var_kl").item() == 0.0


def test_k3_gradient_is_finite_and_vanishes_at_equal_logprobs():
    logp = torch.tensor([-1.0, -2.0], dtype=F64, requires_grad=True)
    kl_loss(logp, torch.tensor([-1.0, -1.0], dtype=F64), torch.ones(2), "low_var_kl").backward()
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp); token mean / 2
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, (1 - 2.718281828459045) / 2],
                                                       dtype=F64), atol=1e-12, rtol=0)


def test_registry_names():
    assert {"kl", "mse", "low_var_kl", "abs"} <= set(KL_ESTIMATORS)
    with pytest.raises(ValueError, match="low_var_kl"):
        get_kl_estimator("k4")
