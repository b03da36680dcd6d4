"""rl_config's objective keys policy_loss and clip_ratio_c: recipe keys, checked up front
(naming the key and the choices) and handed to the actor's LossConfig."""

import pytest

from mindrl.config import load_recipe, names
from mindrl.config.roles import loss_config
from test_config_rollout_correction import CPU2, TINY, rejected


def test_defaults_reach_the_loss_config():
    run = load_recipe(TINY, cluster=CPU2)
    assert (run.rl_config.policy_loss, run.rl_config.clip_ratio_c) == ("ppo_clip", None)
    loss = loss_config(run)
    assert (loss.policy_loss, loss.clip_ratio_c) == ("ppo_clip", None)


@pytest.mark.parametrize("cap", [3.0, 1.5, 10])
def test_a_set_dual_clip_reaches_the_loss_config(cap):
    run = load_recipe(TINY, [f"+rl_config.clip_ratio_c={cap}",
                             "+rl_config.policy_loss=ppo_clip"], cluster=CPU2)
    loss = loss_config(run)
    assert (loss.policy_loss, loss.clip_ratio_c) == ("ppo_clip", float(cap))


def test_null_dual_clip_is_accepted():
    run = load_recipe(TINY, ["+rl_config.clip_ratio_c=null"], cluster=CPU2)
    assert loss_config(run).clip_ratio_c is None


@pytest.mark.parametrize("cap", [1, 1.0, 0.5, 0, -3])
def test_dual_clip_of_one_or_less_is_refused(cap):
    err = rejected([f"+rl_config.clip_ratio_c={cap}"])
    assert "rl_config.clip_ratio_c" in err.keys
    assert "must be > 1" in str(err) and "or null" in str(err)


@pytest.mark.parametrize("name", ["gspo", "ppo", "PPO_CLIP"])
def test_unknown_policy_loss_names_the_key_and_the_choices(name):
    err = rejected([f"+rl_config.policy_loss={name}"])
    assert err.keys == ["rl_config.policy_loss"]
    assert "registered: ppo_clip" in str(err) and name in str(err)


def test_policy_loss_table_equals_the_registry():
    from mindrl.algorithms import POLICY_LOSSES

    assert set(names.POLICY_LOSSES) == set(POLICY_LOSSES)
