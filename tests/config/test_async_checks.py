"""rl_config.async_mode and max_staleness (config/checks/asynchronous.py): refused before anything
starts, naming the key and the fix; the bound and the loss's rollout correction they imply."""

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.checks.asynchronous import staleness_bound
from mindrl.config.roles import loss_config
from support.recipe_errors import recipe_error

TINY = "grpo_tiny_cpu"
CPU3 = ClusterResources("cpu", 3)
OWN_ENGINES = ["+generate_config.rollout_devices=1", "rl_config.colocate_actor_ref=true"]


def rejected(overrides):
    return recipe_error(TINY, overrides, CPU3)


def test_off_by_default_and_synchronous():
    run = load_recipe(TINY, cluster=CPU3)
    assert (run.rl_config.async_mode, staleness_bound(run.rl_config)) == ("off", 0)
    assert loss_config(run).rollout_is == "off"


@pytest.mark.parametrize("mode, staleness, bound, rollout_is", [
    ("one_step", 1, 1, "token"), ("bounded", 3, 3, "token"), ("bounded", 0, 0, "off")])
def test_the_bound_and_the_behaviour_weight_on_by_default(mode, staleness, bound, rollout_is):
    run = load_recipe(TINY, [f"+rl_config.async_mode={mode}",
                             f"+rl_config.max_staleness={staleness}", *OWN_ENGINES],
                      cluster=CPU3)
    assert staleness_bound(run.rl_config) == bound
    assert loss_config(run).rollout_is == rollout_is


def test_an_explicit_sequence_correction_is_kept():
    run = load_recipe(TINY, ["+rl_config.async_mode=one_step", "+rl_config.rollout_is=sequence",
                             *OWN_ENGINES], cluster=CPU3)
    assert loss_config(run).rollout_is == "sequence"


def test_colocated_engines_are_refused_naming_the_layout_and_the_fix():
    err = rejected(["+rl_config.async_mode=one_step"])
    assert "rl_config.async_mode" in err.keys
    assert "generate_config.rollout_devices: 0" in str(err)
    assert "set generate_config.rollout_devices" in str(err)


@pytest.mark.parametrize("value", [-1, 1.5])
def test_a_negative_or_fractional_bound_is_refused(value):
    err = rejected(["+rl_config.async_mode=bounded", f"+rl_config.max_staleness={value}",
                    *OWN_ENGINES])
    assert "rl_config.max_staleness" in err.keys


def test_one_step_with_another_bound_and_options_async_cannot_honour():
    err = rejected(["+rl_config.async_mode=one_step", "+rl_config.max_staleness=2",
                    "generate_config.offload_train_param=true", *OWN_ENGINES])
    assert {"rl_config.max_staleness", "generate_config.offload_train_param"} <= set(err.keys)
    assert "set async_mode: bounded" in str(err)


@pytest.mark.parametrize("value", [0, -3])
def test_partial_rollout_tokens_not_a_positive_integer_is_refused(value):
    err = rejected(["+rl_config.async_mode=one_step", f"+rl_config.partial_rollout_tokens={value}",
                    *OWN_ENGINES])
    assert err.keys == ["rl_config.partial_rollout_tokens"]
    assert "must be an integer > 0" in str(err) and "null for whole generations" in str(err)
    err = rejected(["+rl_config.async_mode=one_step", "+rl_config.partial_rollout_tokens=1.5",
                    *OWN_ENGINES])
    assert err.keys == ["rl_config.partial_rollout_tokens"]


def test_partial_rollouts_without_async_mode_are_refused_naming_the_key():
    err = rejected(["+rl_config.partial_rollout_tokens=8"])
    assert err.keys == ["rl_config.partial_rollout_tokens"]
    assert "asynchronous mode only" in str(err)
    assert "set rl_config.async_mode: one_step or bounded" in str(err)


def test_partial_rollouts_in_async_mode_are_accepted_and_off_by_default():
    assert load_recipe(TINY, cluster=CPU3).rl_config.partial_rollout_tokens is None
    run = load_recipe(TINY, ["+rl_config.async_mode=bounded", "+rl_config.max_staleness=2",
                             "+rl_config.partial_rollout_tokens=8", *OWN_ENGINES], cluster=CPU3)
    assert run.rl_config.partial_rollout_tokens == 8


def test_partial_rollouts_with_the_route_agreement_are_refused():
    err = rejected(["+rl_config.async_mode=one_step", "+rl_config.partial_rollout_tokens=8",
                    "+rl_config.log_route_agreement=true", *OWN_ENGINES])
    assert "rl_config.partial_rollout_tokens" in err.keys
    assert "log_route_agreement: false" in str(err)


def test_partial_rollouts_with_r3_routing_replay_are_refused():
    err = rejected(["+rl_config.async_mode=one_step", "+rl_config.partial_rollout_tokens=8",
                    "+rl_config.router_replay=r3", *OWN_ENGINES])
    assert "rl_config.partial_rollout_tokens" in err.keys
    assert "router_replay: r2" in str(err)


def test_inflight_sync_is_off_by_default_and_accepted_in_async_mode():
    assert load_recipe(TINY, cluster=CPU3).rl_config.inflight_sync == "off"
    for mode in ("keep_kv", "recompute_kv"):
        run = load_recipe(TINY, ["+rl_config.async_mode=bounded", "+rl_config.max_staleness=2",
                                 f"+rl_config.inflight_sync={mode}", *OWN_ENGINES],
                          cluster=CPU3)
        assert run.rl_config.inflight_sync == mode


@pytest.mark.parametrize("extra, says", [
    ([], "set rl_config.async_mode: one_step or bounded"),
    (["+rl_config.async_mode=one_step", "+rl_config.partial_rollout_tokens=8", *OWN_ENGINES],
     "partial_rollout_tokens: null, or inflight_sync: off"),
    (["+rl_config.async_mode=one_step", "generate_config.infer_tensor_parallel_size=2",
      *OWN_ENGINES], "infer_tensor_parallel_size: 1"),
    (["+rl_config.async_mode=one_step", "+rl_config.router_replay=r3", *OWN_ENGINES],
     "router_replay: r2"),
    (["+rl_config.async_mode=one_step", "generate_config.enable_prefix_caching=true",
      *OWN_ENGINES], "enable_prefix_caching: false, or inflight_sync: recompute_kv"),
])
def test_what_an_inflight_sync_cannot_honour_is_refused_naming_the_fix(extra, says):
    err = rejected(["+rl_config.inflight_sync=keep_kv", *extra])
    assert "rl_config.inflight_sync" in err.keys
    assert says in str(err)


def test_an_unknown_inflight_mode_is_refused():
    err = rejected(["+rl_config.inflight_sync=sometimes", "+rl_config.async_mode=one_step",
                    *OWN_ENGINES])
    assert "rl_config.inflight_sync" in " ".join(err.keys) or "inflight_sync" in str(err)
