"""rl_config.router_replay (config/checks/replay.py): refused on a dense actor, r2 at actor
PP > 1, and r3 where the device's engine cannot hand its routes back as configured (CUDA's
vLLM returns them only with its prefix cache and one pipeline stage; a capture on a device
with graphs needs eager), each naming the key and the fix; accepted on the MoE default.
rl_config.log_route_agreement likewise, and what it turns on."""

import pytest

from mindrl.config import ClusterResources, ConfigError, load_recipe

CPU2 = ClusterResources("cpu", 2)
KEY = "rl_config.router_replay"
# The tiny MoE recipe on 2 devices of another kind.
ON = {kind: [f"+rl_config.actor_resource.num_{kind}s=2", "~rl_config.actor_resource.num_cpus",
             f"+rl_config.reference_resource.num_{kind}s=2",
             "~rl_config.reference_resource.num_cpus"] for kind in ("gpu", "npu")}
CLUSTERS = {"gpu": ClusterResources("cuda", 2), "npu": ClusterResources("npu", 2)}


def _problems(recipe, overrides, key=KEY, cluster=CPU2):
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, overrides, cluster=cluster, check_paths=False)
    return [p for p in info.value.problems if p.key == key]


@pytest.mark.parametrize("mode", ["r2", "r3"])
def test_replay_on_a_dense_actor_is_refused(mode):
    [p] = _problems("grpo_tiny_cpu", [f"+rl_config.router_replay={mode}"])
    assert "tiny-qwen2" in p.message and "no experts" in p.message
    assert p.fix == "set rl_config.router_replay: off"


def test_r2_needs_the_actor_at_pipeline_size_1():
    [p] = _problems("grpo_tiny_moe_cpu", ["rl_config.router_replay=r2",
                                          "megatron_training.pipeline_model_parallel_size=2"])
    assert "pipeline parallel size 1" in p.message and "r3" in p.fix


@pytest.mark.parametrize("key", [KEY, "rl_config.log_route_agreement"])
def test_routes_on_cuda_need_vllms_prefix_cache_and_one_pipeline_stage(key):
    """vLLM returns routes itself on CUDA (enable_return_routed_experts), and refuses them
    without its prefix cache or at infer PP > 1: said before start."""
    ask = "rl_config.router_replay=r3" if key == KEY else "+rl_config.log_route_agreement=true"
    gpu = [ask, *ON["gpu"]]
    [p] = _problems("grpo_tiny_moe_cpu", gpu, key, CLUSTERS["gpu"])
    assert "cuda's vLLM returns" in p.message and "enable_prefix_caching: true" in p.message
    assert p.fix.startswith("set generate_config.enable_prefix_caching: true, or ")
    problems = _problems("grpo_tiny_moe_cpu", gpu + [
        "generate_config.enable_prefix_caching=true",
        "generate_config.infer_pipeline_parallel_size=2"], key, CLUSTERS["gpu"])
    assert [p.message.split("with generate_config.")[1] for p in problems] == [
        "infer_pipeline_parallel_size: 1"]
    run = load_recipe("grpo_tiny_moe_cpu", gpu + ["generate_config.enable_prefix_caching=true"],
                      cluster=CLUSTERS["gpu"], check_paths=False)
    assert run.generate_config.enable_prefix_caching


def test_r3_on_npu_captures_routes_and_needs_eager():
    npu = ["rl_config.router_replay=r3", *ON["npu"]]
    [p] = _problems("grpo_tiny_moe_cpu", npu + ["generate_config.enforce_eager=false"], KEY,
                    CLUSTERS["npu"])
    assert "captured in the engine's workers" in p.message and "graph replay" in p.message
    assert p.fix == "set generate_config.enforce_eager: true, or use r2 or off"
    run = load_recipe("grpo_tiny_moe_cpu", npu, cluster=CLUSTERS["npu"], check_paths=False)
    assert run.generate_config.enforce_eager
    assert run.rl_config.router_replay == "r3"


def test_r3_on_cpu_captures_routes_whatever_the_eager_setting():
    """vLLM's CPU build runs eager whatever the recipe says (config/cpu_notice.py)."""
    run = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3",
                                            "generate_config.enforce_eager=false"],
                      cluster=CPU2, check_paths=False)
    assert run.rl_config.router_replay == "r3" and not run.generate_config.enforce_eager


def test_r2_is_accepted_on_the_moe_default():
    run = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r2"], cluster=CPU2,
                      check_paths=False)
    assert run.rl_config.router_replay == "r2"


def test_r3_is_accepted_with_the_asynchronous_loop():
    """The asynchronous loop asks its engines for routes as the synchronous one does: each
    batch's passes replay the routes of the weights that generated it."""
    run = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3",
                                            "+rl_config.async_mode=one_step",
                                            "+generate_config.rollout_devices=1",
                                            "rl_config.colocate_actor_ref=true"],
                      cluster=CPU2, check_paths=False)
    assert (run.rl_config.router_replay, run.rl_config.async_mode) == ("r3", "one_step")


AGREEMENT = "rl_config.log_route_agreement"


def _agreement_problems(recipe, overrides):
    return _problems(recipe, overrides, AGREEMENT)


def test_the_route_agreement_is_refused_on_a_dense_actor_and_at_pipeline_size_2():
    [p] = _agreement_problems("grpo_tiny_cpu", ["+rl_config.log_route_agreement=true"])
    assert "no experts" in p.message and p.fix == "set rl_config.log_route_agreement: false"
    [p] = _agreement_problems("grpo_tiny_moe_cpu", [
        "+rl_config.log_route_agreement=true", "megatron_training.pipeline_model_parallel_size=2"])
    assert "pipeline parallel size 1" in p.message


def test_the_route_agreement_asks_the_engines_for_routes_and_runs_the_old_pass():
    """Replay off, one update per batch (the MoE default): without the agreement the step
    skips the old-log-prob pass and the engines return no routes; with it, both."""
    from mindrl.trainer.grpo_trainer import GRPOTrainer
    from mindrl.trainer.route_replay_step import engine_route_kwargs, update_replay

    plain = load_recipe("grpo_tiny_moe_cpu", [], cluster=CPU2, check_paths=False)
    on = load_recipe("grpo_tiny_moe_cpu", ["+rl_config.log_route_agreement=true"],
                     cluster=CPU2, check_paths=False)
    assert not GRPOTrainer(plain)._needs_old_log_probs()
    assert engine_route_kwargs(plain.rl_config) == {}
    assert GRPOTrainer(on)._needs_old_log_probs()
    assert engine_route_kwargs(on.rl_config) == {"with_routes": True}
    assert update_replay(on.rl_config) is None           # measured, never replayed
