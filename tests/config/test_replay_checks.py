"""rl_config.router_replay (config/replay_checks.py): refused on a dense actor, r2 at actor
PP > 1 and r3 while the engine returns no routes, each naming the key and the fix; accepted
on the MoE default. rl_config.log_route_agreement likewise, and what it turns on."""

import pytest

from mindrl.config import ClusterResources, ConfigError, load_recipe
from mindrl.config import replay_checks

CPU2 = ClusterResources("cpu", 2)
KEY = "rl_config.router_replay"


def _problems(recipe, overrides, key=KEY):
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, overrides, cluster=CPU2, check_paths=False)
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


def test_r3_is_refused_while_the_engine_returns_no_routes(monkeypatch):
    monkeypatch.setattr(replay_checks, "ENGINE_RETURNS_ROUTES", False)
    [p] = _problems("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3"])
    assert "returns none" in p.message and p.fix == "use r2 or off"
    monkeypatch.setattr(replay_checks, "ENGINE_RETURNS_ROUTES", True)
    run = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3"], cluster=CPU2,
                      check_paths=False)
    assert run.rl_config.router_replay == "r3"


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


def test_the_route_agreement_is_refused_while_the_engine_returns_no_routes(monkeypatch):
    monkeypatch.setattr(replay_checks, "ENGINE_RETURNS_ROUTES", False)
    [p] = _agreement_problems("grpo_tiny_moe_cpu", ["+rl_config.log_route_agreement=true"])
    assert "returns none" in p.message


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
