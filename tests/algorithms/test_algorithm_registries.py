"""Registries: names the config uses, uniform estimator signature, clear unknown-name errors."""

import inspect

import pytest
import torch

from mindrl.algorithms import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATORS,
    POLICY_LOSSES,
    Registry,
    get_advantage_estimator,
)


def test_registered_names():
    assert set(ADVANTAGE_ESTIMATORS) == {"group_norm", "rloo", "reinforce_plus_plus", "gae"}
    assert {"kl", "mse", "low_var_kl", "abs"} <= set(KL_ESTIMATORS)
    assert set(LOSS_AGGREGATORS) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}
    assert set(POLICY_LOSSES) == {"ppo_clip"}


def test_unknown_estimator_lists_known_names():
    with pytest.raises(ValueError) as info:
        get_advantage_estimator("grpo")
    message = str(info.value)
    assert "'grpo'" in message
    for name in ADVANTAGE_ESTIMATORS:
        assert name in message


def test_all_advantage_estimators_share_one_keyword_signature():
    signatures = {name: inspect.signature(fn) for name, fn in ADVANTAGE_ESTIMATORS.items()}
    first = signatures["group_norm"]
    assert all(sig == first for sig in signatures.values())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in first.parameters.values())
    assert set(first.parameters) == {"response_mask", "scores", "token_rewards", "group_id",
                                     "values", "gamma", "lam", "eps", "norm_by_std"}


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_runs_on_one_full_batch_by_name(name):
    batch = dict(scores=torch.tensor([1.0, 0.0, 0.5]),
                 token_rewards=torch.tensor([[0, 0, 1.0, 0], [0, 0, 0, 0], [0.5, 0, 0, 0]]),
                 group_id=torch.tensor([0, 0, 1]),
                 values=torch.zeros(3, 4),
                 response_mask=torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]))
    advantages, returns = ADVANTAGE_ESTIMATORS.lookup(name)(**batch, gamma=1.0, lam=1.0)
    assert advantages.shape == returns.shape == (3, 4)
    assert torch.isfinite(advantages).all()
    assert torch.count_nonzero(advantages[batch["response_mask"] == 0]) == 0


def test_duplicate_registration_is_refused():
    registry = Registry("thing")
    registry.register("a")(len)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a")(len)
