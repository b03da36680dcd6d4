"""Each way a recipe can be wrong fails early with ConfigError naming key, value and fix."""

from pathlib import Path

import pytest

from mindrl.config import (ClusterResources, ConfigError, compose_recipe, load_recipe, validate,
                           validate_lenient)
from mindrl.config.errors import CLUSTER
from support.recipe_errors import recipe_error

TINY = "grpo_tiny_cpu"


def rejected(overrides, cluster=ClusterResources("cpu", 2), recipe=TINY, **kw):
    return recipe_error(recipe, overrides, cluster, **kw)


def assert_names(err, key, *words):
    assert key in err.keys, str(err)
    text = str(err)
    assert key in text
    for word in words:
        assert word in text, text


# 1. unknown or misspelt keys, at any depth ---------------------------------------------

@pytest.mark.parametrize("override,key,hint", [
    ("+rl_config.n_sample_per_prompt=4", "rl_config.n_sample_per_prompt",
     "n_samples_per_prompt"),
    ("+generate_config.sampling_config.temprature=0.5",
     "generate_config.sampling_config.temprature", "temperature"),
    ("+actor_config.tensor_parallel_size=2", "actor_config.tensor_parallel_size",
     "tensor_model_parallel_size"),
    ("+rl_confg.kl_coef=0.1", "rl_confg", "rl_config"),
])
def test_unknown_key_suggests_nearest(override, key, hint):
    assert_names(rejected([override]), key, f"did you mean '{hint}'")


def test_misspelt_override_without_plus_is_caught_at_composition():
    assert_names(rejected(["rl_config.n_sample_per_prompt=4"]),
                 "rl_config.n_sample_per_prompt", "n_samples_per_prompt")


def test_type_errors_name_the_key():
    err = rejected(["rl_config.n_samples_per_prompt=eight", "megatron_training.bf16=1"])
    assert_names(err, "rl_config.n_samples_per_prompt", "'eight'", "integer")
    assert_names(err, "megatron_training.bf16", "true or false")


def test_run_wide_key_in_a_role_section():
    assert_names(rejected(["+actor_config.global_batch_size=8"]),
                 "actor_config.global_batch_size", "megatron_training.global_batch_size")


# 2-4. parallel sizes against the model --------------------------------------------------

def test_tp_must_divide_query_groups(cpu8):
    # tiny-qwen2: 4 heads, 2 query groups
    err = rejected(["+actor_config.tensor_model_parallel_size=4",
                    "rl_config.actor_resource.num_cpus=4"], cpu8)
    assert_names(err, "actor_config.tensor_model_parallel_size", "num_query_groups=2", "[1, 2]")


def test_ref_tp_is_checked_per_role(cpu8):
    err = rejected(["+ref_config.tensor_model_parallel_size=3",
                    "rl_config.reference_resource.num_cpus=3"], cpu8)
    assert_names(err, "ref_config.tensor_model_parallel_size", "num_attention_heads=4")


def test_infer_tp_must_divide_heads(cpu8):
    err = rejected(["generate_config.infer_tensor_parallel_size=4",
                    "rl_config.actor_resource.num_cpus=4"], cpu8)
    assert_names(err, "generate_config.infer_tensor_parallel_size", "num_query_groups=2")


def test_pp_must_divide_layers(cpu8):
    err = rejected(["megatron_training.pipeline_model_parallel_size=3",
                    "rl_config.actor_resource.num_cpus=3",
                    "rl_config.reference_resource.num_cpus=3"], cpu8)
    assert_names(err, "megatron_training.pipeline_model_parallel_size", "num_layers=2")


def test_an_uneven_pipeline_must_fit_the_layers(cpu8):
    # 3 layers over PP 2 split only unevenly; a first stage of 3 leaves the last none
    base = ["model.num_layers=3", "megatron_training.pipeline_model_parallel_size=2",
            "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2"]
    assert_names(rejected(base, cpu8), "megatron_training.pipeline_model_parallel_size",
                 "num_layers=3", "decoder_first/last_pipeline_num_layers")
    err = rejected(base + ["+megatron_training.decoder_first_pipeline_num_layers=3"], cpu8)
    assert_names(err, "megatron_training.decoder_first_pipeline_num_layers", "leave 0",
                 "num_layers=3")
    err = rejected(base + ["+actor_config.decoder_last_pipeline_num_layers=0"], cpu8)
    assert_names(err, "actor_config.decoder_last_pipeline_num_layers", "at least 1")
    run = load_recipe(TINY, base + ["+megatron_training.decoder_first_pipeline_num_layers=1"],
                      cluster=cpu8)
    assert run.actor_config.decoder_first_pipeline_num_layers == 1


def test_infer_and_train_tp_must_divide_one_another(cpu8):
    # 12 heads / 6 groups allow TP 2 and TP 3, which do not divide one another
    err = rejected(["model.num_attention_heads=12", "model.num_query_groups=6",
                    "model.kv_channels=32", "model.ffn_hidden_size=384",
                    "+actor_config.tensor_model_parallel_size=2",
                    "generate_config.infer_tensor_parallel_size=3",
                    "rl_config.actor_resource.num_cpus=6", "rl_config.kl_coef=0"], cpu8)
    assert_names(err, "generate_config.infer_tensor_parallel_size", "training TP=2")


def test_shared_cpu_weights_need_unsharded_vllm(cpu8):
    err = rejected(["+generate_config.cpu_weights=shared",
                    "generate_config.infer_tensor_parallel_size=2",
                    "rl_config.actor_resource.num_cpus=2"], cpu8)
    assert_names(err, "generate_config.cpu_weights", "infer TP x PP = 2 x 1", "packed")
    assert_names(rejected(["+generate_config.cpu_weights=shard"]), "generate_config.cpu_weights",
                 "shared")


# 5. resources -----------------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, -2])
def test_resource_must_be_positive(count):
    assert_names(rejected([f"rl_config.actor_resource.num_cpus={count}"]),
                 "rl_config.actor_resource.num_cpus", "at least 1")


def test_resources_larger_than_cluster():
    err = rejected(["rl_config.actor_resource.num_cpus=2",    # + ref 1 apart = 3 > 2
                    "rl_config.colocate_actor_ref=false"])
    assert_names(err, "rl_config.reference_resource.num_cpus", "3 devices", "has 2")
    assert err.problems[0].category == CLUSTER


def test_colocation_shares_devices(cpu2):
    ok = ["rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2",
          "rl_config.colocate_actor_ref=true"]
    run = load_recipe(TINY, ok, cluster=cpu2)
    assert run.rl_config.colocate_actor_ref
    assert_names(rejected(ok[:2] + ["rl_config.colocate_actor_ref=false"]),
                 "rl_config.reference_resource.num_cpus", "4 devices")


def test_resource_kind_must_match_cluster():
    err = rejected(["~rl_config.actor_resource.num_cpus",
                    "+rl_config.actor_resource.num_npus=1"])
    assert_names(err, "rl_config.actor_resource.num_npus", "npu", "num_cpus")


def test_resource_needs_exactly_one_count():
    err = rejected(["+rl_config.actor_resource.num_gpus=1"])
    assert_names(err, "rl_config.actor_resource", "exactly one")


def test_reference_resource_required_with_kl():
    assert_names(rejected(["~rl_config.reference_resource", "rl_config.colocate_actor_ref=false"]),
                 "rl_config.reference_resource", "kl_coef")


# 6. batch sizes ---------------------------------------------------------------------------

def test_mini_batch_must_divide_global_batch():
    assert_names(rejected(["megatron_training.global_batch_size=16",
                           "rl_config.mini_batch_size=5"]), "rl_config.mini_batch_size",
                 "global_batch_size=16", "[1, 2, 4, 8, 16]")


BY_ROWS = ["megatron_training.max_tokens_per_micro_batch=null",
           "ref_config.max_tokens_per_micro_batch=null"]


def test_micro_batch_must_divide_mini_batch():
    # mini batch = 8 prompts x 16 samples = 128; 24 does not divide it
    assert_names(rejected(["megatron_training.micro_batch_size=24", *BY_ROWS]),
                 "megatron_training.micro_batch_size", "128")


def test_micro_batch_times_dp(cpu8):
    # 4 CPUs at TP1 -> DP 4; 4 x 64 = 256 does not divide a mini batch of 8 x 16 = 128
    err = rejected(["rl_config.actor_resource.num_cpus=4",
                    "megatron_training.micro_batch_size=64", *BY_ROWS], cpu8)
    assert_names(err, "megatron_training.micro_batch_size", "DP 4")


def test_a_token_budget_ignores_the_row_count_and_needs_only_dp_to_divide(cpu8):
    # 128 samples over DP 4: any micro batch size is fine when micro batches go by tokens.
    run = load_recipe(TINY, ["rl_config.actor_resource.num_cpus=4",
                             "megatron_training.micro_batch_size=64"], cluster=cpu8)
    assert run.actor_config.max_tokens_per_micro_batch == 432
    err = rejected(["rl_config.actor_resource.num_cpus=3"], cpu8)
    assert_names(err, "rl_config.mini_batch_size", "actor DP 3")


def test_a_token_budget_below_the_longest_sample_is_refused_naming_both():
    err = rejected(["megatron_training.max_tokens_per_micro_batch=20"])
    assert_names(err, "megatron_training.max_tokens_per_micro_batch",
                 "max_prompt_length 24 + max_tokens 3 = 27 tokens", "at least 27")


def test_a_token_budget_needs_packed_rows_and_no_forward_row_count():
    err = rejected(["+megatron_training.pack_sequences=false",
                    "ref_config.max_tokens_per_micro_batch=null"])
    assert_names(err, "megatron_training.max_tokens_per_micro_batch", "packed sequences")
    err = rejected(["+rl_config.actor_forward_micro_batch_size=8"])
    assert_names(err, "rl_config.actor_forward_micro_batch_size", "by megatron_training."
                 "max_tokens_per_micro_batch")


def test_world_size_multiple_of_tp_pp(cpu8):
    err = rejected(["+actor_config.tensor_model_parallel_size=2",
                    "rl_config.actor_resource.num_cpus=3"], cpu8)
    assert_names(err, "rl_config.actor_resource.num_cpus", "TP x PP = 2 x 1")


def test_sequence_budget():
    assert_names(rejected(["generate_config.sampling_config.max_tokens=100"]),
                 "megatron_training.seq_length", "124")


def test_min_tokens_within_max_tokens():
    assert_names(rejected(["+generate_config.sampling_config.min_tokens=4"]),
                 "generate_config.sampling_config.min_tokens", "max_tokens=3")


def test_cpu_threads_positive():
    err = rejected(["+generate_config.cpu_threads=0", "+actor_config.cpu_threads=0"])
    assert_names(err, "generate_config.cpu_threads", "at least 1")
    assert_names(err, "actor_config.cpu_threads", "at least 1")


@pytest.mark.parametrize("key,value,allowed", [
    ("temperature", -0.5, ">= 0"), ("top_p", 1.5, "(0, 1]"), ("top_p", 0, "(0, 1]"),
    ("top_k", 0, "-1 (off) or >= 1"), ("min_p", 1.2, "[0, 1]"), ("logprobs", -1, ">= 0")])
def test_sampling_ranges_are_checked_up_front(key, value, allowed):
    full = f"generate_config.sampling_config.{key}"
    assert_names(rejected([f"{full}={value}"]), full, allowed)
    with pytest.raises(ConfigError, match=full):   # plan mode refuses it too
        validate_lenient(compose_recipe(TINY, [f"{full}={value}"]), ClusterResources("cpu", 2))


@pytest.mark.parametrize("override,key", [
    ("generate_config.sampling_config.max_tokens=0", "generate_config.sampling_config.max_tokens"),
    ("rl_config.val_n_samples=0", "rl_config.val_n_samples"),
    ("+rl_config.val_max_prompts=0", "rl_config.val_max_prompts"),
    ("rl_config.max_gen_rounds=0", "rl_config.max_gen_rounds")])
def test_sample_counts_are_at_least_one(override, key):
    assert_names(rejected([override]), key, "at least 1")


def test_gae_is_refused_until_a_critic_exists():
    assert_names(rejected(["rl_config.adv_estimator=gae"]), "rl_config.adv_estimator",
                 "critic", "group_norm")


def test_expert_parallel_is_refused_until_moe_exists():
    assert_names(rejected(["+generate_config.infer_expert_parallel_size=2"]),
                 "generate_config.infer_expert_parallel_size", "mixture-of-experts")


def test_entropy_schedule_needs_both_ends():
    assert_names(rejected(["rl_config.entropy_decay_steps=0"]), "rl_config.entropy_decay_steps",
                 "entropy_coeff_final")
    assert_names(rejected(["rl_config.entropy_coeff_final=-0.1"]),
                 "rl_config.entropy_coeff_final", "negative")


# 7. paths (separate switch) -------------------------------------------------------------

def test_missing_paths_only_with_check_paths(tmp_path, monkeypatch, cpu2):
    monkeypatch.setenv("MINDRL_WORK_DIR", str(tmp_path))
    run = load_recipe(TINY, cluster=cpu2)  # check_paths=False: fine
    err = rejected([], check_paths=True)
    assert_names(err, "megatron_training.data_path", str(tmp_path))
    assert_names(err, "megatron_training.tokenizer_name_or_path")
    assert_names(err, "megatron_training.load", "examples/ckpt")
    data = Path(run.megatron_training.data_path)
    data.parent.mkdir(parents=True)
    data.write_text("{}\n")
    (tmp_path / "models" / "tiny-qwen2-hf").mkdir(parents=True)
    (tmp_path / "models" / "tiny-qwen2-mcore").mkdir(parents=True)
    load_recipe(TINY, cluster=cpu2, check_paths=True)


# 8. names -----------------------------------------------------------------------------------

def test_unknown_verifier():
    assert_names(rejected(["rl_config.verifier_function=[arithh]"]),
                 "rl_config.verifier_function[0]", "'arith'")


def test_verifier_weight_length():
    assert_names(rejected(["rl_config.verifier_weight=[1.0,0.5]"]),
                 "rl_config.verifier_weight", "2 weight(s) for 1 verifier(s)")


@pytest.mark.parametrize("key,value,hint", [
    ("adv_estimator", "group_nrom", "group_norm"), ("kl_penalty", "low_var", "low_var_kl")])
def test_unknown_algorithm_names(key, value, hint):
    assert_names(rejected([f"rl_config.{key}={value}"]), f"rl_config.{key}", hint)


def test_all_problems_reported_at_once():
    err = rejected(["rl_config.mini_batch_size=5", "rl_config.verifier_function=[nope]",
                    "rl_config.verifier_weight=[]"])
    assert {"rl_config.mini_batch_size", "rl_config.verifier_function[0]",
            "rl_config.verifier_weight"} <= set(err.keys)


def test_plain_dict_input(cpu2):
    from omegaconf import OmegaConf
    plain = OmegaConf.to_container(compose_recipe(TINY), resolve=True)
    assert validate(plain, cpu2).rl_config.n_samples_per_prompt == 16
    plain["rl_config"]["epochs"] = "two"
    with pytest.raises(ConfigError, match=r"rl_config.epochs='two'"):
        validate(plain, cpu2)


def test_a_bare_off_in_yaml_means_off():
    """YAML 1.1 reads `rollout_is: off` and `verify_sync: off` as false: they mean "off"."""
    from omegaconf import OmegaConf

    from mindrl.config.schema import GenerateConfig, RLConfig
    from mindrl.config.structure import check_partial

    raw = OmegaConf.to_container(OmegaConf.create("rollout_is: off\nverify_sync: off\n"))
    problems = []
    assert check_partial(RLConfig, {"rollout_is": raw["rollout_is"]}, "rl_config",
                         problems) == {"rollout_is": "off"}
    assert check_partial(GenerateConfig, {"verify_sync": raw["verify_sync"]},
                         "generate_config", problems) == {"verify_sync": "off"}
    assert problems == []
