"""`+scale_down=D`: a cluster recipe in miniature keeps its topology and flags."""

import pytest

from mindrl.config import ClusterResources, ConfigError, load_recipe, make_plan
from mindrl.config.placement import engine_devices, rollout_data_parallel_size
from mindrl.config.scale_down import with_cpu_slots

A3 = ClusterResources("npu", 16, 1, device_memory_gib=64)   # one Ascend A3 node


def _layout(run, role):
    cfg = run.role(role)
    return (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
            run.resource(role).count // cfg.model_parallel_size)


@pytest.mark.parametrize("recipe, divisor, slots", [("r1_zero_qwen25_7b", 2, 8),
                                                     ("r1_zero_qwen25_32b", 8, 4),
                                                     ("grpo_qwen25_7b", 2, 4)])
def test_scale_down_divides_devices_and_tp_and_keeps_the_rest(recipe, divisor, slots, cpu2,
                                                              recipe_clusters):
    full = load_recipe(recipe, cluster=recipe_clusters[recipe])
    mini = load_recipe(recipe, [f"+scale_down={divisor}"], cluster=cpu2)
    for role in full.active_roles:
        tp, pp, dp = _layout(full, role)
        assert _layout(mini, role) == (tp // divisor, pp, dp)
        assert mini.resource(role).kind == "cpu" and mini.resource(role).count == slots
    gen, mini_gen = full.generate_config, mini.generate_config
    assert mini_gen.infer_tensor_parallel_size == gen.infer_tensor_parallel_size // divisor
    assert rollout_data_parallel_size(mini) == rollout_data_parallel_size(full) == 4
    assert len(engine_devices(mini)) == 4
    # Flags as the recipe has them; model, data and lengths tiny.
    assert mini.megatron_training.sequence_parallel == full.megatron_training.sequence_parallel
    assert mini.rl_config.colocate_actor_ref == full.rl_config.colocate_actor_ref
    assert mini.rl_config.use_kl_loss == full.rl_config.use_kl_loss
    assert mini.rl_config.verifier_function == full.rl_config.verifier_function
    # The fewest prompts that keep the updates per step and fill a micro batch on every actor
    # DP rank; here each of the 4 engines gets one prompt (1 would fill DP2's micro batches).
    assert mini.megatron_training.global_batch_size == 4 and mini.rl_config.mini_batch_size == 2
    assert (full.megatron_training.global_batch_size // full.rl_config.mini_batch_size
            == mini.megatron_training.global_batch_size // mini.rl_config.mini_batch_size)
    assert mini.rl_config.n_samples_per_prompt == full.rl_config.n_samples_per_prompt
    assert mini.actor_config.micro_batch_size == full.actor_config.micro_batch_size
    assert (mini_gen.offload_train_param, mini_gen.offload_train_optimizer) == \
        (gen.offload_train_param, gen.offload_train_optimizer)
    assert mini.model.name == "tiny-qwen2" and mini.prepare.task == "arith"
    assert mini.generate_config.sampling_config.max_tokens == 8
    assert not mini.actor_config.bf16
    # Two cores, yet the plan places the miniature on its logical CPU slots.
    plan = make_plan(mini, with_cpu_slots(cpu2, mini), [])
    assert plan["rollout"]["instances"] == 4


def test_a_pipeline_deeper_than_the_tiny_model_shortens_on_fewer_devices(cpu2, caplog):
    # grpo_qwen3_235b_a22b: TP2 x PP16 (5 + 6 x 14 + 5 layers) x DP4 on 128 devices, expert
    # TP 1 x EP 8 (MindSpeed-RL's EP4 with moe_tp_extend_ep): EP 4 at TP 1
    mini = load_recipe("grpo_qwen3_235b_a22b", ["+scale_down=2"], cluster=cpu2)
    for role in ("actor", "ref"):
        cfg = mini.role(role)
        assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
                cfg.expert_model_parallel_size) == (1, 2, 4)
        assert (cfg.decoder_first_pipeline_num_layers,
                cfg.decoder_last_pipeline_num_layers) == (None, None)
    assert mini.resource("actor").count == 8              # 128 / 2 / (16 / 2): DP stays 4
    assert mini.generate_config.infer_tensor_parallel_size == 2
    assert "pipeline of 16 stages becomes 2" in caplog.text
    assert "decoder_first_pipeline_num_layers" in caplog.text
    # a pipeline the tiny layers already fill is the recipe's (grpo_qwen3_8b: PP2)
    assert load_recipe("grpo_qwen3_8b", ["+scale_down=2"], cluster=cpu2) \
        .actor_config.pipeline_model_parallel_size == 2


def test_a_divisor_that_does_not_divide_is_refused_naming_the_key(cpu2):
    with pytest.raises(ConfigError) as e:
        load_recipe("r1_zero_qwen25_7b", ["+scale_down=3"], cluster=cpu2)
    assert "actor_config.tensor_model_parallel_size" in str(e.value)
    assert "scale_down=3" in str(e.value)
    with pytest.raises(ConfigError, match="scale_down"):
        load_recipe("r1_zero_qwen25_7b", ["+scale_down=0"], cluster=cpu2)


def test_an_engine_across_nodes_is_refused_before_anything_starts():
    from mindrl.config import ClusterResources

    # 16 NPUs on 4 nodes of 4: inference TP8 would put each engine on two nodes.
    with pytest.raises(ConfigError) as e:
        load_recipe("r1_zero_qwen25_7b", ["generate_config.infer_tensor_parallel_size=8"],
                    cluster=ClusterResources("npu", 4, 4, device_memory_gib=64))
    assert "rollout engine 0 would span devices 0-7, across nodes (4 node(s) x 4 npu" in str(e.value)
    assert "dividing each node's devices (4)" in str(e.value)


@pytest.mark.parametrize("recipe, divisor, prompts", [("grpo_qwen25vl_7b_geo3k", 4, 2),
                                                      ("grpo_qwen25vl_32b_geo3k", 8, 2)])
def test_a_miniature_mini_batch_fills_a_micro_batch_on_every_actor_rank(recipe, divisor,
                                                                        prompts, cpu2):
    """geometry3k's 512 prompts x 5 become 2 prompts per mini batch: 1 prompt's 5 samples
    would leave the 7B's DP2 x micro 4 short, and would not split over the 32B's DP2."""
    mini = load_recipe(recipe, [f"+scale_down={divisor}"], cluster=cpu2)
    assert mini.rl_config.mini_batch_size == prompts
    assert mini.megatron_training.global_batch_size == prompts * 4   # 512 / 128: 4 updates
    dp = mini.resource("actor").count // mini.actor_config.model_parallel_size
    samples = prompts * mini.rl_config.n_samples_per_prompt
    assert samples % dp == 0 and samples >= dp * mini.actor_config.micro_batch_size
    smaller = (prompts - 1) * mini.rl_config.n_samples_per_prompt
    assert smaller % dp or smaller < dp * mini.actor_config.micro_batch_size


@pytest.mark.parametrize("model, tiny", [("qwen25-7b", "tiny-qwen2"), ("llama3-8b", "tiny-qwen2"),
                                         ("qwen3-8b", "tiny-qwen3"),
                                         ("qwen3-30b-a3b", "tiny-qwen3-moe")])
def test_the_tiny_model_is_the_recipe_models_family(model, tiny, cpu2):
    mini = load_recipe("grpo_qwen25_7b", [f"model={model}", "+scale_down=2"], cluster=cpu2)
    assert mini.model.name == mini.megatron_training.model == mini.prepare.tiny_model == tiny
    assert mini.actor_config.load.endswith(f"models/{tiny}-mcore")
    assert mini.megatron_training.tokenizer_name_or_path.endswith(f"models/{tiny}-hf")


def test_a_tensor_parallel_size_of_1_stays_1_and_its_engines_shrink_with_the_devices(cpu2):
    """grpo_qwen3_8b: actor TP2 PP2 DP4 and 16 vLLM engines of TP1 on 16 NPUs; at D=2 the
    actor is TP1 PP2 DP4 on 8 slots and the engines 8 of TP1."""
    full = load_recipe("grpo_qwen3_8b", cluster=A3, check_paths=False)
    mini = load_recipe("grpo_qwen3_8b", ["+scale_down=2"], cluster=cpu2)
    assert _layout(full, "actor") == (2, 2, 4) and _layout(mini, "actor") == (1, 2, 4)
    assert rollout_data_parallel_size(full) == 16 and rollout_data_parallel_size(mini) == 8
    assert mini.generate_config.infer_tensor_parallel_size == 1
    assert mini.resource("actor").count == 8 and mini.model.name == "tiny-qwen3"
    # One prompt per engine; DP4 x micro 1 filled; the recipe's single update per step kept.
    assert mini.megatron_training.global_batch_size == mini.rl_config.mini_batch_size == 8
    assert make_plan(mini, with_cpu_slots(cpu2, mini), [])["rollout"]["instances"] == 8
    with pytest.raises(ConfigError) as e:     # TP2 cannot be divided by 4
        load_recipe("grpo_qwen3_8b", ["+scale_down=4"], cluster=cpu2)
    assert "actor_config.tensor_model_parallel_size" in str(e.value)


def test_dapo_lengths_follow_the_tiny_response_limit(cpu2):
    """dapo_qwen3_32b at D=8: the 512-of-2048 overlong buffer keeps its quarter of the 8 tiny
    tokens, rollout_max_tokens and filter_groups_train_batch_size follow what they copy."""
    mini = load_recipe("dapo_qwen3_32b", ["+scale_down=8"], cluster=cpu2)
    rl = mini.rl_config
    assert mini.generate_config.sampling_config.max_tokens == rl.rollout_max_tokens == 8
    assert rl.overlong_buffer_len == 2 and rl.overlong_penalty_factor == 0.1
    assert rl.filter_groups_train_batch_size == mini.megatron_training.global_batch_size == 2
    assert _layout(mini, "actor") == (1, 2, 1) and rollout_data_parallel_size(mini) == 2
    assert rl.dynamic_sampling and mini.model.name == "tiny-qwen3"


def test_whole_experts_over_tp_ranks_keep_their_split_over_dp_in_miniature(cpu2, caplog):
    # dapo_qwen3_30b_a3b: TP4 x DP4 with expert TP 1 x EP 8 (MindSpeed-RL's EP2 with
    # moe_tp_extend_ep) on 16 devices -> TP1 x DP4 on 4 slots, EP 8 -> 2: EP x expert TP / TP
    # (each DP rank's share of a layer's experts) stays 2
    mini = load_recipe("dapo_qwen3_30b_a3b", ["+scale_down=4"], cluster=cpu2)
    actor = mini.actor_config
    assert (actor.tensor_model_parallel_size, actor.expert_tensor_parallel_size,
            actor.expert_model_parallel_size, mini.resource("actor").count) == (1, 1, 2, 4)
    assert "expert parallelism 8 becomes 2 with its TP 4 -> 1" in caplog.text
    # at expert TP = TP (null) the EP is the DP ranks' split already: it stays
    same = load_recipe("dapo_qwen3_30b_a3b", ["+scale_down=4",
                                              "actor_config.expert_tensor_parallel_size=null",
                                              "actor_config.expert_model_parallel_size=2"],
                       cluster=cpu2)
    assert same.actor_config.expert_model_parallel_size == 2
    # EP 2 x expert TP 1 over TP4 is half an expert block per DP rank: no miniature keeps it
    with pytest.raises(ConfigError) as e:
        load_recipe("dapo_qwen3_30b_a3b", ["+scale_down=4",
                                           "actor_config.expert_model_parallel_size=2"],
                    cluster=cpu2)
    assert "actor_config.expert_model_parallel_size" in str(e.value)
    assert "scale_down=4" in str(e.value)
