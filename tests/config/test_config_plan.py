"""Plan mode numbers: placement, TP/PP/DP, batch arithmetic, memory."""

from mindrl.config import (ClusterResources, compose_recipe, format_plan, load_recipe,
                           make_plan, validate_lenient)
from mindrl.config.errors import CLUSTER, PATHS
from mindrl.config.memory import params_per_device, train_state_bytes
from mindrl.config.model_spec import load_model_spec


def test_tiny_batch_arithmetic_and_placement(cpu2):
    plan = make_plan(load_recipe("grpo_tiny_cpu", cluster=cpu2), cpu2)
    b = plan["batch"]
    assert b["samples_per_step"] == 16 * 8 == 128
    assert b["mini_batches_per_step"] == 1 and b["mini_batch_samples"] == 128
    assert b["micro_batches_per_mini_batch"] == 8 and b["gradient_accumulation_steps"] == 8
    assert b["optimizer_steps_per_step"] == 1
    # The reference lives in the actor's process; vLLM shares its CPU slot.
    assert plan["roles"]["actor"]["devices"] == [0] and plan["roles"]["ref"]["devices"] == [0]
    assert plan["roles"]["ref"]["host"] == "actor"
    assert plan["rollout"]["devices"] == [0] and plan["rollout"]["instances"] == 1
    assert plan["devices_required"] == 1 and plan["fits_cluster"]


def test_7b_plan_on_its_cluster(recipe_clusters):
    cluster = recipe_clusters["r1_zero_qwen25_7b"]
    plan = make_plan(load_recipe("r1_zero_qwen25_7b", cluster=cluster), cluster)
    actor = plan["roles"]["actor"]
    assert (actor["tp"], actor["pp"], actor["dp"]) == (4, 2, 2)
    assert actor["devices"] == list(range(16)) and actor["nodes"] == [0, 1]
    assert actor["shares_with"] == ["ref"]
    assert plan["rollout"]["instances"] == 4 and plan["rollout"]["prompts_per_instance"] == 8
    b = plan["batch"]
    # 16 prompts x 8 samples per mini batch = 128 samples; micro 2 -> 64; over DP 2 -> 32
    assert b["micro_batches_per_mini_batch"] == 64 and b["gradient_accumulation_steps"] == 32
    mem = plan["memory_bytes"]["roles"]["actor"]
    # bf16 params (2 B), fp32 main grads (4 B), fp32 copy + Adam m, v (12 B) over DP 2
    assert mem["grads"] == 2 * mem["params"] and mem["optimizer"] == 3 * mem["params"]
    assert 1.5 * 2**30 < mem["params"] < 2.0 * 2**30  # ~7.6e9 / 8 shards x 2 B
    assert not plan["warnings"]


def test_memory_counts_match_the_model_at_tp1_pp1():
    spec = load_model_spec("tiny-qwen2")
    assert params_per_device(spec, 1, 1) == spec.num_parameters()
    # TP halves the sharded matrices: two shards hold at least the whole minus replicas
    assert params_per_device(spec, 2, 1) < spec.num_parameters()
    fp32 = train_state_bytes(spec, 1, 1, 1, "float32", True)
    assert fp32["grads"] == fp32["params"] and fp32["optimizer"] == 2 * fp32["params"]


def test_colocate_all_models_puts_every_role_on_the_same_devices(cpu2):
    run = load_recipe("grpo_tiny_cpu", ["+rl_config.reward_model=true",
                                        "+reward_config.load=/ckpt/rm",
                                        "+rl_config.reward_resource.num_cpus=1",
                                        "rl_config.colocate_all_models=true"], cluster=cpu2)
    plan = make_plan(run, cpu2)
    assert {r: p["devices"] for r, p in plan["roles"].items()} == {
        "actor": [0], "ref": [0], "reward": [0]}
    assert plan["devices_required"] == 1


def test_7b_is_planned_on_a_cpu_box_with_warnings(cpu2):
    run, warnings = validate_lenient(compose_recipe("r1_zero_qwen25_7b"), cpu2,
                                     recipe="r1_zero_qwen25_7b")
    assert CLUSTER in {w.category for w in warnings} <= {CLUSTER, PATHS}
    plan = make_plan(run, cpu2, warnings)
    assert not plan["fits_cluster"] and plan["roles"]["actor"]["nodes"] is None
    text = format_plan(plan)
    assert "TP=4 PP=2 DP=2" in text and "micro_batch<=6144 tokens (packed)" in text
    assert "<= 6144 real tokens each" in text
    assert "rl_config.actor_resource.num_npus" in text and "warnings" in text


def test_memory_warning_when_the_plan_does_not_fit():
    small = ClusterResources("npu", 8, 2, device_memory_gib=8)
    run = load_recipe("r1_zero_qwen25_7b", cluster=small)
    plan = make_plan(run, small)
    assert any("exceeds" in w for w in plan["warnings"])


def test_a_vl_plan_says_how_images_travel_and_whether_the_tower_trains(recipe_clusters):
    cluster = recipe_clusters["grpo_qwen25vl_7b_geo3k"]
    plan = make_plan(load_recipe("grpo_qwen25vl_7b_geo3k", cluster=cluster), cluster)
    assert plan["images"] == {"tower": "qwen2_5_vl, depth 32", "tower_trains": True,
                              "pixel_dtype": "bfloat16"}
    assert (plan["roles"]["actor"]["tp"], plan["roles"]["actor"]["dp"]) == (4, 2)
    assert plan["rollout"]["instances"] == 2
    frozen = load_recipe("grpo_qwen25vl_7b_geo3k", ["actor_config.freeze_vision_tower=true"],
                         cluster=cluster)
    text = format_plan(make_plan(frozen, cluster))
    assert "vision tower (qwen2_5_vl, depth 32): frozen" in text
    assert make_plan(load_recipe("grpo_tiny_cpu", cluster=ClusterResources("cpu", 2)),
                     ClusterResources("cpu", 2))["images"] is None


def test_a_moe_plan_counts_total_and_active_parameters(cpu2):
    """Qwen3-30B-A3B: 30.5B parameters held, 3.3B a token passes through (the published
    figures); weights in memory are the total, the FLOP floor's measure the active count."""
    plan = make_plan(load_recipe("grpo_tiny_cpu", ["model=qwen3-30b-a3b"], cluster=cpu2), cpu2)
    assert round(plan["model_parameters"] / 1e9, 1) == 30.5
    assert round(plan["model_active_parameters"] / 1e9, 1) == 3.4
    assert "(30.53B parameters, 3.35B active per token)" in format_plan(plan)
    spec = load_model_spec("qwen3-30b-a3b")
    assert params_per_device(spec, 1, 1) == spec.num_parameters()
    dense = make_plan(load_recipe("grpo_tiny_cpu", cluster=cpu2), cpu2)
    assert dense["model_active_parameters"] == dense["model_parameters"]
    assert "active per token" not in format_plan(dense)


def test_the_plan_says_what_a_score_is_made_of_and_what_the_update_does(cpu2, recipe_clusters):
    tiny = load_recipe("grpo_tiny_cpu", ["rl_config.verifier_function=[arith,max_digit]",
                                         "rl_config.verifier_weight=[1.0,0.5]",
                                         "rl_config.kl_coef=0", "+rl_config.clip_ratio_c=3.0",
                                         "+rl_config.rollout_is=token"], cluster=cpu2)
    text = format_plan(make_plan(tiny, cpu2))
    section = text.split("reward and update:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section == [
        "  score = 1 x arith + 0.5 x max_digit",
        "  verifiers in 1 worker process(es), 10 s a sample",
        "  advantages group_norm; loss ppo_clip (clip 0.2, dual-clip 3), token-mean; no KL term; "
        "entropy bonus 0.05 -> 0 over 150 steps; dynamic sampling (up to 3 rounds); "
        "rollout IS token (cap 2)"]
    cluster = recipe_clusters["dapo_qwen3_30b_a3b"]
    dapo = make_plan(load_recipe("dapo_qwen3_30b_a3b", cluster=cluster), cluster)["objective"]
    assert dapo["score_terms"] == ["1 x acc_for_dapo",
                                   "DAPO's overlong penalty (last 512 tokens, down to -0.1)"]
    assert "loss ppo_clip (clip 0.2 / 0.28), token-mean" in dapo["update"]
    assert "no KL term" in dapo["update"] and "routing replay r3" in dapo["update"]


def test_the_kv_cache_is_counted_in_episodes_at_full_length(cpu2):
    """grpo_tiny_agent_cpu: 2 layers x 2 KV heads x 32 dims x K and V x 4 B = 1 KiB a token;
    an episode at full length is 16 prompt + 32 response tokens = 48, two 32-token blocks
    (64 KiB): 64 MiB hold 1024 of them, and a step runs 8 x 16 = 128 at once."""
    plan = make_plan(load_recipe("grpo_tiny_agent_cpu", cluster=cpu2), cpu2)
    r = plan["memory_bytes"]["rollout"]
    assert (r["full_length_tokens"], r["full_length_held"], r["at_once"]) == (48, 1024, 128)
    assert "holds 1024 episodes at full length (48 tokens" in format_plan(plan)
    assert not any("KV cache" in w for w in plan["warnings"])
    # 2 MiB hold 32 such episodes: fewer than run at once, which the plan warns of
    small = make_plan(load_recipe("grpo_tiny_agent_cpu", [
        "generate_config.kv_cache_memory_bytes=2097152"], cluster=cpu2), cpu2)
    assert small["memory_bytes"]["rollout"]["full_length_held"] == 32
    assert any("holds 32 sequences at full length (48 tokens) but runs up to 128" in w
               and "kv_cache_memory_bytes" in w for w in small["warnings"])
