"""The reward-model keys: something must score, the reward role needs its own weights and
devices, and its model gets a scalar head."""

import pytest

from mindrl.config import ClusterResources, load_recipe
from support.recipe_errors import recipe_error

TINY = "grpo_tiny_cpu"
CPU8 = ClusterResources("cpu", 8)
RM = ["+rl_config.reward_model=true", "+rl_config.reward_resource.num_cpus=1"]


def rejected(overrides):
    return recipe_error(TINY, overrides, CPU8)


def assert_names(err, key, *words):
    assert key in err.keys, str(err)
    for word in (key, *words):
        assert word in str(err), str(err)


def test_reward_model_role_is_built_with_a_scalar_head():
    run = load_recipe(TINY, RM + ["+reward_config.load=/ckpt/rm",
                                  "+rl_config.reward_model_weight=0.5"], cluster=CPU8)
    assert run.active_roles == ["actor", "ref", "reward"]
    assert run.models["reward"].head == "scalar" and run.models["actor"].head == "lm"
    assert run.rl_config.reward_model_weight == 0.5 and run.rl_config.rule_reward


def test_nothing_to_score():
    assert_names(rejected(["rl_config.rule_reward=false"]), "rl_config.reward_model",
                 "nothing scores the rollouts", "rl_config.rule_reward: true")


def test_reward_model_needs_its_own_checkpoint():
    assert_names(rejected(RM), "megatron_training.load", "the actor's checkpoint",
                 "reward_config.load")
    assert_names(rejected(RM + ["+reward_config.load=null"]), "reward_config.load",
                 "not set", "cli/convert_ckpt.py")


def test_reward_model_needs_devices():
    assert_names(rejected(["+rl_config.reward_model=true", "+reward_config.load=/ckpt/rm"]),
                 "rl_config.reward_resource", "reward_model=true", "num_cpus")


def test_reward_model_weight_is_a_number():
    assert_names(rejected(RM + ["+rl_config.reward_model_weight=high"]),
                 "rl_config.reward_model_weight", "a number")


def test_reward_model_must_share_the_actors_tokenizer(tmp_path):
    from mindrl.models.tokenizers import build_tokenizer
    from mindrl.trainer.launch import check_reward_tokenizer

    build_tokenizer("char").save_pretrained(tmp_path / "actor")
    other = build_tokenizer("char")
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path / "rm")
    same = RM + ["+reward_config.load=/ckpt/rm",
                 f"megatron_training.tokenizer_name_or_path={tmp_path / 'actor'}"]
    check_reward_tokenizer(load_recipe(TINY, same, cluster=CPU8))   # inherited: fine
    run = load_recipe(TINY, same + [f"+reward_config.tokenizer_name_or_path={tmp_path / 'rm'}"],
                      cluster=CPU8)
    with pytest.raises(ValueError, match="reward_config.tokenizer_name_or_path=.*same vocab"):
        check_reward_tokenizer(run)
