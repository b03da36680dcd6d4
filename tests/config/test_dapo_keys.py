"""DAPO as MindSpeed-RL spells it: dapo_qwen3_32b's names validate and become MindRL's keys;
each name that would disagree with the key doing the work is refused naming key and fix."""

import pytest

from mindrl.config import ClusterResources, ConfigError, load_recipe
from mindrl.rewards import OverlongConfig
from mindrl.trainer.assemble import overlong_config

A3 = ClusterResources("npu", 16, 1, device_memory_gib=64)
RECIPE = "dapo_qwen3_32b"


def dapo(*overrides):
    return load_recipe(RECIPE, list(overrides), cluster=A3, check_paths=False)


def refused(*overrides):
    with pytest.raises(ConfigError) as info:
        dapo(*overrides)
    return info.value


def test_the_ported_names_do_what_they_say():
    run = dapo()
    rl, mt = run.rl_config, run.megatron_training
    assert rl.loss_agg_mode == "token-mean"                       # token_level_loss
    assert (rl.clip_ratio_low, rl.clip_ratio_high) == (0.2, 0.28)  # clip_higher_enable
    assert (rl.overlong_buffer_len, rl.overlong_penalty_factor) == (512, 0.1)
    assert rl.dynamic_sampling and rl.max_gen_rounds == 3          # filter_groups_*
    assert mt.no_shuffle and run.active_roles == ["actor"]         # init_kl_coef 0: no ref
    assert overlong_config(run) == OverlongConfig(2048, 512, 0.1)


def test_no_buffer_no_penalty():
    run = dapo("rl_config.overlong_buffer_enable=false", "rl_config.overlong_buffer=0")
    assert run.rl_config.overlong_buffer_len == 0 and overlong_config(run) is None


def test_an_alias_beside_its_mindrl_key_with_another_value_is_refused():
    error = refused("+rl_config.overlong_buffer_len=256")
    assert error.keys == ["rl_config.overlong_buffer"] and "keep one" in str(error)
    assert dapo("+rl_config.dynamic_sampling=true").rl_config.dynamic_sampling


def test_token_level_loss_must_agree_with_loss_agg_mode():
    error = refused("rl_config.token_level_loss=false")
    assert error.keys == ["rl_config.token_level_loss"]
    assert "set rl_config.loss_agg_mode: seq-mean-token-mean" in str(error)
    run = dapo("rl_config.token_level_loss=false", "+rl_config.loss_agg_mode=seq-mean-token-mean")
    assert run.rl_config.loss_agg_mode == "seq-mean-token-mean"


def test_clip_higher_off_refuses_bounds_other_than_clip_ratio():
    error = refused("rl_config.clip_higher_enable=false")
    assert error.keys == ["rl_config.clip_ratio_high"]    # low is 0.2 = clip_ratio
    assert "clip_higher_enable: true" in str(error) and "clip_ratio_high=0.28" in str(error)
    run = dapo("rl_config.clip_higher_enable=false", "rl_config.clip_ratio_high=0.2")
    assert run.rl_config.clip_ratio_high == 0.2


@pytest.mark.parametrize("overrides", [["rl_config.overlong_buffer_enable=false"],
                                       ["rl_config.overlong_buffer=0"]])
def test_overlong_switch_and_buffer_must_agree(overrides):
    error = refused(*overrides)
    assert error.keys == ["rl_config.overlong_buffer_enable"]
    assert "overlong_buffer > 0" in str(error)


def test_rollout_max_tokens_must_be_the_sampling_limit():
    error = refused("rl_config.rollout_max_tokens=1024")
    assert error.keys == ["rl_config.rollout_max_tokens"]
    assert "generate_config.sampling_config.max_tokens=2048" in str(error)


def test_filter_groups_metric_must_be_the_score():
    error = refused("rl_config.filter_groups_metric=acc")
    assert error.keys == ["rl_config.filter_groups_metric"]
    assert "verifier_function to [METRIC]" in str(error)
    error = refused("rl_config.verifier_function=[acc_for_dapo,format]",
                    "rl_config.verifier_weight=[1.0,0.1]")
    assert error.keys == ["rl_config.filter_groups_metric"]


def test_filter_groups_max_batches_is_max_gen_rounds():
    error = refused("rl_config.filter_groups_max_batches=5")
    assert error.keys == ["rl_config.filter_groups_max_batches"]
    assert "max_gen_rounds: 5" in str(error)
    run = dapo("rl_config.filter_groups_max_batches=5", "+rl_config.max_gen_rounds=5")
    assert run.rl_config.max_gen_rounds == 5


def test_filter_groups_train_batch_size_is_the_global_batch():
    error = refused("rl_config.filter_groups_train_batch_size=16")
    assert error.keys == ["rl_config.filter_groups_train_batch_size"]
    assert "set it to 32" in str(error)


@pytest.mark.parametrize("override, key", [
    ("rl_config.overlong_buffer=4096", "rl_config.overlong_buffer_len"),
    ("rl_config.overlong_buffer_penalty_factor=-1.0", "rl_config.overlong_penalty_factor")])
def test_overlong_settings_out_of_range_are_refused(override, key):
    assert key in refused(override).keys


def test_the_penalty_needs_the_rule_score():
    error = refused("rl_config.rule_reward=false")
    assert "rl_config.overlong_buffer_len" in error.keys
    assert "set rule_reward: true" in str(error)


def test_no_shuffle_is_run_wide():
    error = refused("+actor_config.no_shuffle=false")
    assert error.keys == ["actor_config.no_shuffle"]
