"""A config ported from MindSpeed-RL's GRPO guide: every key of the guide's parameter list
is accepted and honoured, or refused naming key, value, why and the fix
(docs/config-reference.md says which)."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mindrl.config import ClusterResources, ConfigError, validate
from mindrl.config.checks.ported import ONLY_VALUES
from mindrl.config.resolvers import register_resolvers
from mindrl.config.placement import place_roles

HERE = Path(__file__).parent
GUIDE = "mindspeed_grpo_guide"
NPU16 = ClusterResources("npu", 8, 2, device_memory_gib=64)

# The guide's parameter list, section by section
# (https://gitee.com/ascend/MindSpeed-RL/blob/master/docs/zh/features/grpo_yaml.md).
GUIDE_KEYS = {
    "megatron_training": ["stage", "global_batch_size", "data_path", "tokenizer_name_or_path",
                          "recompute_granularity", "recompute_num_layers", "recompute_method"],
    "actor_config": ["micro_batch_size", "tensor_model_parallel_size",
                     "pipeline_model_parallel_size", "lr", "lr_decay_style", "min_lr",
                     "weight_decay", "lr_warmup_fraction", "clip_grad", "load", "save",
                     "no_load_optim", "no_load_rng", "no_save_optim", "no_save_rng"],
    "rl_config": ["use_integrated_worker", "blocking", "gamma", "lam",
                  "actor_forward_micro_batch_size", "ref_forward_micro_batch_size",
                  "adv_estimator", "kl_penalty", "kl_ctrl_type", "init_kl_coef",
                  "mini_batch_size", "max_prompt_length", "clip_ratio", "entropy_coeff",
                  "n_samples_per_prompt", "guarantee_order", "shuffle_mini_batch",
                  "log_max_throughput", "num_cpus_for_local_task", "actor_resource",
                  "rule_reward", "verifier_function", "verifier_weight", "use_tensorboard",
                  "use_wandb", "wandb_project", "wandb_exp_name", "wandb_save_dir"],
    "generate_config": ["infer_tensor_parallel_size", "infer_pipeline_parallel_size",
                        "infer_expert_parallel_size", "trust_remote_code",
                        "offload_train_optimizer", "offload_train_grad", "offload_train_param",
                        "max_num_seqs", "max_model_len", "max_num_batched_tokens",
                        "enforce_eager", "torchair_graph", "enable_expert_parallel", "dtype",
                        "gpu_memory_utilization", "num_scheduler_steps", "sampling_config"],
    "generate_config.sampling_config": ["logprobs", "max_tokens", "top_p", "top_k", "min_p",
                                        "temperature", "detokenize"],
}
# Refused at the values the fixture (a typical MindSpeed-RL config) brings them with.
REFUSED = {"megatron_training.recompute_granularity", "megatron_training.recompute_method",
           "megatron_training.recompute_num_layers", "rl_config.num_cpus_for_local_task"}
WITHOUT_REFUSED = [f"~{key}" for key in sorted(REFUSED)]


def guide(*overrides):
    register_resolvers()
    with initialize_config_dir(config_dir=str(HERE), version_base="1.3", job_name="guide"):
        return compose(config_name=GUIDE, overrides=list(overrides))


def test_the_fixture_carries_every_key_of_the_guide():
    cfg = guide()
    for section, keys in GUIDE_KEYS.items():
        node = OmegaConf.select(cfg, section)
        missing = [key for key in keys if key not in node]
        assert not missing, f"{section} lacks {missing}"
    assert cfg.model.name == "qwen25-7b"   # the guide's `defaults: model`


def test_the_guide_config_is_refused_only_for_the_keys_readme_lists():
    with pytest.raises(ConfigError) as info:
        validate(guide(), NPU16)
    assert set(info.value.keys) == REFUSED, str(info.value)
    assert "activation recomputation is not implemented" in str(info.value)
    assert "recompute_granularity='full'" in str(info.value)


def test_the_accepted_keys_validate_and_are_honoured():
    run = validate(guide(*WITHOUT_REFUSED), NPU16)
    rl = run.rl_config
    assert run.megatron_training.stage == "ray_grpo"
    assert rl.kl_coef == 0.001 and run.active_roles == ["actor", "ref"]   # init_kl_coef
    placed = {p.role: p.devices for p in place_roles(run)}
    assert placed["ref"] == placed["actor"] == tuple(range(16))   # use_integrated_worker
    assert rl.wandb_save_dir == "/logs/wandb" and rl.lam == 0.95


@pytest.mark.parametrize("key", sorted(ONLY_VALUES))
def test_each_mindspeed_only_key_is_refused_at_another_value(key):
    other = {"megatron_training.stage": "ray_ppo", "rl_config.kl_ctrl_type": "adaptive",
             "generate_config.num_scheduler_steps": 4,
             "megatron_training.recompute_num_layers": 2,
             "rl_config.num_cpus_for_local_task": 2.0,
             "megatron_training.no_pad_to_seq_lengths": "false",
             "megatron_training.finetune": "false"}.get(
                 key, "full" if "recompute" in key else "true")
    allowed, _, fix = ONLY_VALUES[key]
    with pytest.raises(ConfigError) as info:
        validate(guide(*WITHOUT_REFUSED, f"++{key}={other}"), NPU16)
    assert info.value.keys == [key], str(info.value)
    assert f"{key}=" in str(info.value) and fix in str(info.value)


def test_stage_refusal_names_the_stages_that_exist():
    with pytest.raises(ConfigError, match="ray_grpo") as info:
        validate(guide(*WITHOUT_REFUSED, "megatron_training.stage=ray_dapo"), NPU16)
    assert "megatron_training.stage='ray_dapo'" in str(info.value)


def test_init_kl_coef_and_kl_coef_disagreeing_is_refused():
    with pytest.raises(ConfigError, match="rl_config.init_kl_coef") as info:
        validate(guide(*WITHOUT_REFUSED, "+rl_config.kl_coef=0.01"), NPU16)
    assert "keep one" in str(info.value)
    run = validate(guide(*WITHOUT_REFUSED, "+rl_config.kl_coef=0.001"), NPU16)
    assert run.rl_config.kl_coef == 0.001


def test_recompute_in_a_role_section_is_refused_there():
    with pytest.raises(ConfigError) as info:
        validate(guide(*WITHOUT_REFUSED, "+actor_config.recompute_granularity=selective"),
                 NPU16)
    assert info.value.keys == ["actor_config.recompute_granularity"], str(info.value)


def test_stage_is_run_wide():
    with pytest.raises(ConfigError, match="actor_config.stage"):
        validate(guide(*WITHOUT_REFUSED, "+actor_config.stage=ray_grpo"), NPU16)
