"""The MoE recipe keys: refused on a dense model naming the key; refused at values MindRL does
not run (expert parallelism that does not divide the experts or DP, or with an explicit
allgather dispatcher: a null one follows the layout, alltoall at EP > 1; vLLM expert
parallelism; MoE at TP > 1 without sequence parallelism; a negative or switched-off balancing
loss; grouped GEMM, whose stacked weights no table maps), each naming the key and the fix;
handed to each role's engine; and the recipes that carry them: grpo_tiny_moe_cpu (its EP 2
example as documented) and dapo_qwen3_30b_a3b (MindSpeed-RL's values; its actor EP2 accepted,
its vLLM EP8 inside each engine: EP = infer TP 4)."""

import pytest

from mindrl.config import (ClusterResources, compose_recipe, load_recipe, make_plan,
                           validate_lenient)
from mindrl.config.checks.moe import check_moe
from mindrl.config.roles import MoETraining, role_setup

from support.recipe_errors import problem_of, recipe_error
from conftest import RECIPE_CLUSTERS

MOE = "grpo_tiny_moe_cpu"
A3B = "dapo_qwen3_30b_a3b"
CPU2 = ClusterResources("cpu", 2)


def refused(recipe, overrides, cluster=CPU2):
    return recipe_error(recipe, overrides, cluster, check_paths=False)


problem = problem_of


@pytest.mark.parametrize("override,key", [
    ("megatron_training.moe_aux_loss_coeff=0.01", "megatron_training.moe_aux_loss_coeff"),
    ("+actor_config.moe_router_freeze=true", "actor_config.moe_router_freeze"),
    ("megatron_training.moe_router_dtype=fp32", "megatron_training.moe_router_dtype"),
    ("megatron_training.expert_model_parallel_size=2",
     "megatron_training.expert_model_parallel_size"),
])
def test_a_moe_key_on_a_dense_model_is_refused_naming_it(override, key):
    if override.startswith("megatron_training."):
        override = "+" + override
    p = problem(refused("grpo_tiny_cpu", [override]), key)
    assert "tiny-qwen2" in p.message and "no experts" in p.message
    assert "remove it" in p.fix and "qwen3_moe" in p.fix


EP = "megatron_training.expert_model_parallel_size"
# EP > 1 dispatched alltoall (config/checks/moe.py), on 4 CPU slots.
ALLTOALL = ("megatron_training.moe_token_dispatcher_type=alltoall",
            "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2")
CPU4 = ClusterResources("cpu", 4)


def test_expert_parallel_2_plans_and_sets_up_the_actor_at_ep2():
    # With the recipe's token budget: every rank runs the plan's count of micro batches
    # (tests/engines/test_megatron_engine_ep.py).
    run = load_recipe(MOE, [f"{EP}=2", *ALLTOALL], cluster=CPU4, check_paths=False)
    assert run.role("actor").max_tokens_per_micro_batch == 432
    assert role_setup(run, "actor", 0).parallel.expert_model_parallel_size == 2
    plan = make_plan(run, CPU4, [])
    assert plan["fits_cluster"], plan["warnings"]


@pytest.mark.parametrize("overrides,cluster,key,words", [
    ([f"{EP}=3", *ALLTOALL], CPU4, EP, "does not divide tiny-qwen3-moe's 8 "
                                                            "experts"),
    ([f"{EP}=4", *ALLTOALL], CPU4, EP, "does not divide the actor's data parallelism 2"),
    ([f"{EP}=2", "megatron_training.moe_token_dispatcher_type=allgather", *ALLTOALL[1:]], CPU4,
     "megatron_training.moe_token_dispatcher_type", "allgather at expert parallelism 2"),
])
def test_expert_parallel_that_does_not_fit_is_refused_naming_key_and_fix(overrides, cluster, key,
                                                                         words):
    p = problem(refused(MOE, overrides, cluster), key)
    assert words in p.message, p.message
    assert p.fix


# The EP example of the recipe's comment and docs/guides/demo.md, as written: on the 2 cores.
EP2_AS_DOCUMENTED = (f"{EP}=2", "rl_config.actor_resource.num_cpus=2",
                     "rl_config.reference_resource.num_cpus=2")


def test_the_documented_ep2_example_validates_with_the_alltoall_dispatcher():
    """The recipe leaves the dispatcher null: each role gets the one its layout needs
    (alltoall at EP > 1, allgather at EP 1, where the recipe always ran)."""
    run = load_recipe(MOE, list(EP2_AS_DOCUMENTED), cluster=CPU2, check_paths=False)
    assert run.actor_config.moe_token_dispatcher_type is None     # the recipe names none
    for role in ("actor", "ref"):
        setup = role_setup(run, role, 0)
        assert setup.parallel.expert_model_parallel_size == 2
        assert setup.moe.token_dispatcher_type == "alltoall"
        assert setup.moe.transformer_config()["moe_token_dispatcher_type"] == "alltoall"
    assert make_plan(run, CPU2, [])["fits_cluster"]
    at_ep1 = load_recipe(MOE, cluster=CPU2, check_paths=False)
    assert role_setup(at_ep1, "actor", 0).moe.token_dispatcher_type == "allgather"


def test_an_explicit_dispatcher_is_kept_or_refused_naming_the_key_and_fix():
    """A dispatcher the user names is never replaced: alltoall at EP 1 stays alltoall, and
    allgather at EP 2 is refused naming the key and both fixes."""
    key = "megatron_training.moe_token_dispatcher_type"
    run = load_recipe(MOE, [f"{key}=alltoall"], cluster=CPU2, check_paths=False)
    assert role_setup(run, "actor", 0).moe.token_dispatcher_type == "alltoall"
    p = problem(refused(MOE, [*EP2_AS_DOCUMENTED, f"{key}=allgather"]), key)
    assert "allgather at expert parallelism 2" in p.message, p.message
    assert p.fix.startswith("set it to alltoall, or null"), p.fix
    # per role: the reference at EP 1 keeps allgather beside an EP 2 actor
    run = load_recipe(MOE, [*EP2_AS_DOCUMENTED, "+ref_config.expert_model_parallel_size=1"],
                      cluster=CPU2, check_paths=False)
    assert [role_setup(run, r, 0).moe.token_dispatcher_type for r in ("actor", "ref")] == [
        "alltoall", "allgather"]


INFER_EP, ENABLE_EP = ("generate_config.infer_expert_parallel_size",
                       "generate_config.enable_expert_parallel")
ON_GPU = ["+rl_config.actor_resource.num_gpus=2", "~rl_config.actor_resource.num_cpus",
          "+rl_config.reference_resource.num_gpus=2", "~rl_config.reference_resource.num_cpus"]
GPU2 = ClusterResources("cuda", 2)


@pytest.mark.parametrize("overrides,cluster,key,words,fix", [
    # EP across engines: vLLM's data parallelism, which MindRL's engines do not couple
    ([f"+{INFER_EP}=2"], CPU2, INFER_EP, "is 2 at infer TP 1: vLLM's expert parallelism spans "
     "one engine's", "set it to 1 (experts whole on each engine), or raise "
     "infer_tensor_parallel_size to 2"),
    ([f"+{INFER_EP}=4", "generate_config.infer_tensor_parallel_size=2", *ON_GPU], GPU2,
     INFER_EP, "EP across engines (vLLM's data parallelism) is not wired",
     "set it to 2 (experts whole over each engine's ranks) or 1 (experts split over infer "
     "TP)"),
    ([f"+{ENABLE_EP}=true", *ON_GPU], GPU2, ENABLE_EP, "at infer TP 1: an engine of one rank",
     "set it to false, or raise infer_tensor_parallel_size"),
    # the CPU build's MoE kernel crashes with EP
    ([f"+{INFER_EP}=2", "generate_config.infer_tensor_parallel_size=2"], CPU2, INFER_EP,
     "cpu's vLLM build cannot run", "set it to 1 (the experts then split over infer TP)"),
])
def test_vllm_expert_parallel_that_cannot_run_is_refused_naming_key_and_fix(overrides, cluster,
                                                                           key, words, fix):
    p = problem(refused(MOE, overrides, cluster), key)
    assert words in p.message and p.fix == fix, (p.message, p.fix)


def test_vllm_expert_parallel_at_the_infer_tp_is_accepted_on_a_gpu():
    """EP = infer TP inside one engine: the experts whole over its ranks (vLLM's
    enable_expert_parallel), on a device kind whose vLLM build runs it."""
    for overrides in ([f"+{INFER_EP}=2"], [f"+{ENABLE_EP}=true"]):
        run = load_recipe(MOE, ["generate_config.infer_tensor_parallel_size=2", *ON_GPU,
                                *overrides], cluster=GPU2, check_paths=False)
        assert run.generate_config.expert_parallel
    p = problem(refused("grpo_tiny_cpu", [f"+{ENABLE_EP}=true", *ON_GPU,
                                          "generate_config.infer_tensor_parallel_size=2"], GPU2),
                ENABLE_EP)
    assert "no experts" in p.message and p.fix == "set it to false"


def test_moe_at_tp2_needs_sequence_parallel():
    err = refused(MOE, ["megatron_training.tensor_model_parallel_size=2",
                        "megatron_training.sequence_parallel=false"], ClusterResources("cpu", 4))
    p = problem(err, "megatron_training.sequence_parallel")
    assert "sequence parallelism" in p.message and p.fix == "set sequence_parallel: true"


@pytest.mark.parametrize("overrides,key,words", [
    (["megatron_training.moe_aux_loss_coeff=-0.1"], "megatron_training.moe_aux_loss_coeff",
     ">= 0"),
    (["megatron_training.moe_aux_loss_coeff=0.01",
      "megatron_training.moe_router_load_balancing_type=none"],
     "megatron_training.moe_aux_loss_coeff", "turns off"),
    (["megatron_training.moe_router_dtype=bf16"], "megatron_training.moe_router_dtype",
     "fp32"),
])
def test_bad_moe_values_are_refused(overrides, key, words):
    err = refused(MOE, overrides)
    assert key in err.keys and words in str(err), str(err)


def test_grouped_gemm_passes_to_the_engine_on_every_device():
    """true / false / null all pass the checks: the model build asks the device
    (tests/models/test_grouped_experts.py) and stops on a true it cannot run."""
    for value in ("true", "false", "null"):
        run, _ = validate_lenient(compose_recipe(
            MOE, [f"+megatron_training.moe_grouped_gemm={value}"]), CPU2, check_paths=False)
        for cluster in (CPU2, ClusterResources("cuda", 2)):
            assert check_moe(run, cluster) == []
        want = {"true": True, "false": False, "null": None}[value]
        assert role_setup(run, "actor", 0).moe.grouped_gemm is want


def test_the_tiny_moe_default_reaches_its_engines():
    run = load_recipe(MOE, cluster=CPU2)
    assert run.models["actor"].name == "tiny-qwen3-moe" and run.prepare.tiny_model == \
        "tiny-qwen3-moe"
    actor = role_setup(run, "actor", 0)
    assert actor.moe == MoETraining() and actor.parallel.expert_model_parallel_size == 1
    assert MoETraining().aux_loss_coeff == 0.0 and MoETraining().router_dtype is None
    run = load_recipe(MOE, ["+actor_config.moe_router_freeze=true",
                            "megatron_training.moe_aux_loss_coeff=0.001"], cluster=CPU2)
    actor, ref = role_setup(run, "actor", 0), role_setup(run, "ref", 0)
    assert actor.moe.router_freeze and not ref.moe.router_freeze
    assert actor.moe.aux_loss_coeff == ref.moe.aux_loss_coeff == 0.001
    dense = load_recipe("grpo_tiny_cpu", cluster=CPU2)
    assert role_setup(dense, "actor", 0).moe is None


def test_tiny_moe_default_keeps_the_dense_defaults_settings():
    moe, dense = load_recipe(MOE, cluster=CPU2), load_recipe("grpo_tiny_cpu", cluster=CPU2)
    assert moe.rl_config == dense.rl_config and moe.generate_config == dense.generate_config
    for key in ("global_batch_size", "lr", "micro_batch_size", "max_tokens_per_micro_batch"):
        assert getattr(moe.actor_config, key) == getattr(dense.actor_config, key), key


def test_dapo_qwen3_30b_a3b_runs_as_shipped_with_vllm_ep_inside_its_engines():
    run = load_recipe(A3B, cluster=RECIPE_CLUSTERS[A3B], check_paths=False)
    # MindSpeed-RL's EP2 with moe_tp_extend_ep at TP4: whole experts over TP4 x EP2 ranks
    actor, gen = run.actor_config, run.generate_config
    assert (actor.expert_tensor_parallel_size, actor.expert_model_parallel_size) == (1, 8)
    # MindSpeed-RL's vLLM EP8 couples 8 engines; here EP = infer TP 4 inside each of 4
    assert (gen.infer_tensor_parallel_size, gen.infer_expert_parallel_size,
            gen.enable_expert_parallel, gen.enforce_eager) == (4, 4, True, True)
    plan = make_plan(run, RECIPE_CLUSTERS[A3B], [])
    assert plan["fits_cluster"] and plan["rollout"]["instances"] == 4, plan["warnings"]
    assert plan["rollout"]["ep"] == 4                    # the plan says what vLLM is asked
    assert [h["devices"] for h in plan["roles"]["actor"]["experts"]][:2] == [[0, 8], [1, 9]]


def test_dapo_qwen3_30b_a3b_at_ep1_keeps_mindspeed_rls_values_and_plans():
    cluster = RECIPE_CLUSTERS[A3B]
    run = load_recipe(A3B, ["actor_config.expert_model_parallel_size=1",
                            "actor_config.expert_tensor_parallel_size=null",
                            "generate_config.infer_tensor_parallel_size=1",
                            "generate_config.infer_expert_parallel_size=1",
                            "generate_config.enable_expert_parallel=false"],
                      cluster=cluster, check_paths=False)
    actor, rl, gen = run.actor_config, run.rl_config, run.generate_config
    assert (actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size,
            actor.sequence_parallel) == (4, 1, True)
    assert (actor.weight_decay, actor.adam_beta2, run.megatron_training.train_iters) == \
        (0.1, 0.999, 200)
    assert actor.moe_aux_loss_coeff == 0.0 and actor.moe_token_dispatcher_type == "alltoall"
    assert rl.kl_coef == 0.0 and run.active_roles == ["actor"] and rl.dynamic_sampling
    assert (rl.clip_ratio_low, rl.clip_ratio_high, rl.n_samples_per_prompt) == (0.2, 0.28, 8)
    assert gen.infer_tensor_parallel_size == 1 and gen.max_model_len == 4096
    plan = make_plan(run, cluster, [])
    assert plan["fits_cluster"] and plan["devices_required"] == 16, plan["warnings"]


def test_grpo_qwen3_235b_a22b_keeps_mindspeed_rls_layout_with_94_layers_on_16_stages():
    name = "grpo_qwen3_235b_a22b"
    err = refused(name, [], RECIPE_CLUSTERS[name])
    assert [p.key for p in err.problems] == [INFER_EP]
    assert "EP across engines" in err.problems[0].message
    cluster = RECIPE_CLUSTERS[name]
    ep4 = load_recipe(name, [f"{INFER_EP}=4"], cluster=cluster, check_paths=False)
    assert make_plan(ep4, cluster, [])["rollout"]["instances"] == 32    # EP inside TP4
    run = load_recipe(name, ["generate_config.infer_expert_parallel_size=1"], cluster=cluster,
                      check_paths=False)
    for role in ("actor", "ref"):
        cfg = run.role(role)
        # MindSpeed-RL's EP4 with moe_tp_extend_ep at TP2: expert TP 1 x EP 8
        assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
                cfg.expert_model_parallel_size, cfg.expert_tensor_parallel_size,
                cfg.sequence_parallel) == (2, 16, 8, 1, True)
        assert (cfg.decoder_first_pipeline_num_layers,
                cfg.decoder_last_pipeline_num_layers) == (5, 5)
    assert run.models["actor"].num_layers == 94 and run.rl_config.router_replay == "r3"
    assert (run.rl_config.kl_coef, run.rl_config.n_samples_per_prompt,
            run.megatron_training.global_batch_size) == (0.001, 8, 256)
    plan = make_plan(run, cluster, [])
    assert plan["roles"]["actor"]["dp"] == 4 and plan["devices_required"] == 128
    # MindSpeed-RL's stages (96 layers with no-op layers 5 and 95): the same real layers
    assert plan["roles"]["actor"]["stage_layers"] == [5] + [6] * 14 + [5]
    assert plan["rollout"]["instances"] == 32


def test_the_plan_says_which_devices_hold_which_experts():
    from mindrl.config.plan import _ranges, expert_holders, format_plan

    # Megatron's order: TP fastest, then EP inside DP (TP2 EP2 over 8 ranks: DP4).
    assert expert_holders(8, 2, 2, list(range(8))) == [
        {"experts": "0-3", "devices": [0, 1, 4, 5]}, {"experts": "4-7", "devices": [2, 3, 6, 7]}]
    assert expert_holders(8, 1, 1, [0, 1]) == [{"experts": "0-7", "devices": [0, 1]}]
    assert expert_holders(8, 1, 3, [0, 1, 2]) == []
    run = load_recipe(MOE, [f"{EP}=2", *ALLTOALL], cluster=CPU4, check_paths=False)
    plan = make_plan(run, CPU4, [])
    assert plan["roles"]["actor"]["ep"] == 2
    text = format_plan(plan)
    assert "EP=2: experts 0-3 of every MoE layer on devices 0\n" in text
    assert "EP=2: experts 4-7 of every MoE layer on devices 1\n" in text
    # holders over pipeline stages are runs, not one span (TP2 x PP2 x DP2, EP2)
    assert [_ranges(h["devices"]) for h in expert_holders(8, 2, 2, list(range(8)))] == \
        ["0-1,4-5", "2-3,6-7"]
