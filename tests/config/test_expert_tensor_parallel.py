"""megatron_training.expert_tensor_parallel_size (expert TP): null is the role's TP; 1 at TP 2
keeps experts whole and lays them over the TP x EP ranks (MindSpeed-RL's moe_tp_extend_ep).
It reaches the engines' setup, the plan says which devices hold which experts, and a layout
that cannot run is refused before anything starts, naming the key and the fix."""

import pytest

from mindrl.config import ClusterResources, load_recipe, make_plan
from mindrl.config.errors import CLUSTER
from mindrl.config.plan import expert_holders, format_plan
from support.recipe_errors import problem_of, recipe_error
from mindrl.config.roles import Parallelism, role_setup

MOE = "grpo_tiny_moe_cpu"
ETP = "megatron_training.expert_tensor_parallel_size"
EP = "megatron_training.expert_model_parallel_size"
CPU2 = ClusterResources("cpu", 2)
# TP2 + SP over 2 CPU slots, the alltoall dispatcher (EP > 1 needs it).
TP2 = ["megatron_training.tensor_model_parallel_size=2", "megatron_training.sequence_parallel=true",
       "megatron_training.moe_token_dispatcher_type=alltoall",
       "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2"]


def refused(overrides, recipe=MOE, cluster=CPU2):
    return recipe_error(recipe, overrides, cluster, check_paths=False)


problem = problem_of


def test_etp1_ep2_at_tp2_sets_up_the_actor_and_plans_whole_experts_per_tp_rank():
    run = load_recipe(MOE, [*TP2, f"+{ETP}=1", f"{EP}=2"], cluster=CPU2, check_paths=False)
    parallel = role_setup(run, "actor", 0).parallel
    assert (parallel.tensor_model_parallel_size, parallel.expert_model_parallel_size,
            parallel.expert_tensor_parallel_size, parallel.expert_tp) == (2, 2, 1, 1)
    plan = make_plan(run, CPU2, [])
    assert plan["fits_cluster"], plan["warnings"]
    actor = plan["roles"]["actor"]
    assert (actor["tp"], actor["dp"], actor["ep"], actor["etp"]) == (2, 1, 2, 1)
    # experts 0-3 on TP rank 0 and 4-7 on TP rank 1: the two ranks of one model replica
    assert actor["experts"] == [{"experts": "0-3", "devices": [0]},
                                {"experts": "4-7", "devices": [1]}]
    text = format_plan(plan)
    assert "EP=2 expert-TP=1 (whole experts): experts 0-3 of every MoE layer on devices 0\n" \
        in text
    # the reference at the actor's layout (expert TP included) lives in the actor's processes
    assert plan["roles"]["ref"]["host"] == "actor"


def test_null_expert_tp_is_the_tp_and_changes_nothing():
    run = load_recipe(MOE, [o for o in TP2 if "dispatcher" not in o], cluster=CPU2,
                      check_paths=False)
    parallel = role_setup(run, "actor", 0).parallel
    assert parallel.expert_tensor_parallel_size is None and parallel.expert_tp == 2
    assert parallel.model_parallel_layout == (2, 1, 1, 2)
    assert "expert-TP" not in format_plan(make_plan(run, CPU2, []))


def test_the_reference_at_another_expert_tp_gets_processes_of_its_own():
    run = load_recipe(MOE, [*TP2, f"+{ETP}=1", f"{EP}=2",
                            "+ref_config.expert_tensor_parallel_size=2",
                            "+ref_config.expert_model_parallel_size=1"],
                      cluster=CPU2, check_paths=False)
    assert role_setup(run, "ref", 0).parallel.model_parallel_layout == (2, 1, 1, 2)
    assert make_plan(run, CPU2, [])["roles"]["ref"]["host"] is None


def test_expert_holders_follow_megatrons_expert_grid():
    # TP2 DP2 (4 ranks) at expert TP 1, EP 4: one rank per expert block, TP ranks included
    assert expert_holders(8, 1, 4, [0, 1, 2, 3]) == [
        {"experts": "0-1", "devices": [0]}, {"experts": "2-3", "devices": [1]},
        {"experts": "4-5", "devices": [2]}, {"experts": "6-7", "devices": [3]}]
    # expert TP 1, EP 2 on TP2 DP2: two expert-DP replicas (ranks 0-1, 2-3)
    assert [h["devices"] for h in expert_holders(8, 1, 2, [0, 1, 2, 3])] == [[0, 2], [1, 3]]
    # over 2 pipeline stages of 4 ranks each, the grid repeats per stage
    assert [h["devices"] for h in expert_holders(8, 1, 4, list(range(8)))] == [
        [0, 4], [1, 5], [2, 6], [3, 7]]


@pytest.mark.parametrize("overrides,key,words,fix", [
    ([f"+{ETP}=3"], ETP, "must divide the actor's TP 2", "moe_tp_extend_ep"),
    ([f"+{ETP}=0"], ETP, "must divide the actor's TP 2", "set it to 1"),
    ([f"+{ETP}=1", f"{EP}=4"], EP, "times expert TP 1 (4 ranks) does not divide the 2 ranks",
     "use a divisor of 2"),
    ([f"+{ETP}=1", f"{EP}=3"], EP, "does not divide tiny-qwen3-moe's 8 experts",
     "use a divisor"),
    # Megatron reduces expert gradients over expert DP only at EP > 1: at EP 1 the TP
    # ranks' whole copies would each step alone (measured: off by a whole Adam step)
    ([f"+{ETP}=1"], ETP, "below the actor's TP 2, at expert parallelism 1",
     "raise expert_model_parallel_size to 2"),
])
def test_an_expert_tp_that_cannot_run_is_refused_naming_key_and_fix(overrides, key, words, fix):
    p = problem(refused([*TP2, *overrides]), key)
    assert words in p.message, p.message
    assert fix in p.fix, p.fix


# TP2 x DP2 on 4 slots: expert TP 2 at EP 2 dispatches alltoall and all-gathers each
# expert-TP rank's tokens for this EP rank's experts, uneven sizes (measured on gloo:
# "ProcessGroupGloo::allgather: invalid tensor size ... expected (22, 128), got (21, 128)").
CPU4 = ClusterResources("cpu", 4)
TP2_DP2 = [*TP2[:3], "rl_config.actor_resource.num_cpus=4",
           "rl_config.reference_resource.num_cpus=4", f"{EP}=2"]


@pytest.mark.parametrize("etp,words", [(None, "is 2 (null: the TP) at expert parallelism 2"),
                                       (2, "is 2 at expert parallelism 2 on CPU")])
def test_expert_tp_above_1_at_ep2_is_refused_on_gloo_alone(etp, words):
    overrides = TP2_DP2 + ([f"+{ETP}={etp}"] if etp else [])
    p = problem(refused(overrides, cluster=CPU4), ETP)
    assert words in p.message and "gloo" in p.message, p.message
    assert "set it to 1" in p.fix and p.category == CLUSTER   # a plan elsewhere warns
    gpu = ["+rl_config.actor_resource.num_gpus=4", "~rl_config.actor_resource.num_cpus",
           "+rl_config.reference_resource.num_gpus=4", "~rl_config.reference_resource.num_cpus"]
    run = load_recipe(MOE, overrides + gpu, cluster=ClusterResources("cuda", 4),
                      check_paths=False)
    assert role_setup(run, "actor", 0).parallel.expert_tp == 2
    # on CPU, whole experts at EP 2 (or expert TP 2 at EP 1, whose gather is even) run
    fixed = load_recipe(MOE, TP2_DP2 + [f"+{ETP}=1"], cluster=CPU4, check_paths=False)
    assert make_plan(fixed, CPU4, [])["roles"]["actor"]["etp"] == 1
    load_recipe(MOE, TP2, cluster=CPU2, check_paths=False)       # TP2 = expert TP 2 at EP 1


def test_expert_tp_on_a_dense_model_is_refused_naming_it():
    p = problem(refused([f"+{ETP}=1"], recipe="grpo_tiny_cpu"), ETP)
    assert "no experts" in p.message and "remove it" in p.fix


def test_a_parallelism_with_an_expert_tp_that_does_not_divide_tp_is_refused():
    with pytest.raises(ValueError, match="expert_tensor_parallel_size=3 must divide"):
        Parallelism(tensor_model_parallel_size=2, expert_tensor_parallel_size=3)
    assert Parallelism(tensor_model_parallel_size=4, expert_tensor_parallel_size=2).expert_tp == 2


def test_the_memory_estimate_splits_experts_over_expert_tp_x_ep():
    from mindrl.config.memory import _layer_expert_params, params_per_device, train_state_bytes
    from mindrl.config.model_spec import load_model_spec

    spec = load_model_spec("qwen3-30b-a3b")
    experts = spec.num_layers * _layer_expert_params(spec)     # 48 x 128 x 3 x 2048 x 768
    assert experts == 48 * 128 * 3 * 2048 * 768
    # TP4 (experts split over TP by default) vs expert TP 1 x EP 8: the experts 8-fold, not
    # 4-fold, the rest as before
    default, whole = params_per_device(spec, 4, 1), params_per_device(spec, 4, 1, None, None, 8)
    assert default - whole == experts // 4 - experts // 8
    assert params_per_device(spec, 4, 1, None, None, 4) == default
    # the distributed optimizer shards the experts' moments over expert DP (TP4 x DP4 / 8 = 2)
    split = train_state_bytes(spec, 4, 1, 4, "bfloat16", True)
    ep8 = train_state_bytes(spec, 4, 1, 4, "bfloat16", True, etp=1, ep=8)
    assert split == train_state_bytes(spec, 4, 1, 4, "bfloat16", True, etp=4, ep=1)
    dense = whole - experts // 8
    assert ep8["optimizer"] == dense * 12 // 4 + (experts // 8) * 12 // 2
    assert ep8["params"] == whole * 2 < split["params"]
