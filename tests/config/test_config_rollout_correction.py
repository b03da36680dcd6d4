"""rl_config's rollout correction, drift alarm and log-prob chunk keys: checked up front,
naming the key and the fix, and handed to the actor's LossConfig."""

import pytest

from mindrl.config import ClusterResources, load_recipe, names
from mindrl.config.roles import loss_config
from support.recipe_errors import recipe_error

TINY = "grpo_tiny_cpu"
CPU2 = ClusterResources("cpu", 2)


def rejected(overrides):
    return recipe_error(TINY, overrides, CPU2)


def test_defaults_are_off_and_reach_the_loss_config():
    run = load_recipe(TINY, cluster=CPU2)
    rl = run.rl_config
    assert (rl.rollout_is, rl.rollout_is_cap) == ("off", 2.0)
    assert (rl.logprob_drift_threshold, rl.logprob_drift_steps) == (1e-2, 3)
    loss = loss_config(run)
    assert (loss.rollout_is, loss.rollout_is_cap, loss.logprob_chunk_tokens) == ("off", 2.0, 512)


def test_modes_and_chunk_are_passed_through():
    run = load_recipe(TINY, ["+rl_config.rollout_is=sequence", "+rl_config.rollout_is_cap=3",
                             "+rl_config.logprob_chunk_tokens=64",
                             "+rl_config.logprob_drift_threshold=null"], cluster=CPU2)
    loss = loss_config(run)
    assert (loss.rollout_is, loss.rollout_is_cap, loss.logprob_chunk_tokens) == (
        "sequence", 3.0, 64)
    assert run.rl_config.logprob_drift_threshold is None


@pytest.mark.parametrize("cap", [1, 0.5, 0])
def test_cap_of_one_or_less_is_refused(cap):
    err = rejected([f"+rl_config.rollout_is_cap={cap}"])
    assert "rl_config.rollout_is_cap" in err.keys
    assert "must be > 1" in str(err) and "use e.g. 2.0" in str(err)


def test_unknown_mode_suggests_the_nearest():
    err = rejected(["+rl_config.rollout_is=tokens"])
    assert "rl_config.rollout_is" in err.keys and "did you mean 'token'" in str(err)


@pytest.mark.parametrize("override,key,words", [
    ("+rl_config.logprob_drift_threshold=0", "rl_config.logprob_drift_threshold", "null"),
    ("+rl_config.logprob_drift_steps=0", "rl_config.logprob_drift_steps", ">= 1"),
    ("+rl_config.logprob_chunk_tokens=0", "rl_config.logprob_chunk_tokens", ">= 1"),
])
def test_alarm_and_chunk_ranges(override, key, words):
    err = rejected([override])
    assert key in err.keys and words in str(err)


def test_mode_table_equals_the_registry():
    from mindrl.algorithms import ROLLOUT_CORRECTIONS

    assert set(names.ROLLOUT_IS_MODES) == set(ROLLOUT_CORRECTIONS)
