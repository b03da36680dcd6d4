"""trainer/route_replay_step.py: which field each pass replays per rl_config.router_replay,
and the step's replay metrics (route agreement over real tokens, the replay's share)."""

from types import SimpleNamespace

import pytest
import torch

from mindrl.data.batch import Batch
from mindrl.trainer import route_replay_step as step


@pytest.mark.parametrize("mode,passes,update", [("off", None, None),
                                                ("r2", None, "old_routes"),
                                                ("r3", "rollout_routes", "rollout_routes")])
def test_each_mode_names_the_field_its_passes_replay(mode, passes, update):
    rl = SimpleNamespace(router_replay=mode)
    assert step.pass_replay(rl) == passes and step.update_replay(rl) == update


def test_agreement_over_real_tokens_and_the_replay_share():
    prompt_mask = torch.tensor([[0, 1], [1, 1]])
    response_mask = torch.tensor([[1, 1], [1, 0]])      # lengths 3 and 3
    engine = torch.arange(2 * 4 * 1 * 2).view(2, 4, 1, 2) % 8
    engine[:, :, :, 1] = (engine[:, :, :, 0] + 1) % 8
    trainer = engine.clone()
    trainer[0, 1, 0] = torch.tensor([6, 7]) if engine[0, 1, 0, 0] != 6 else torch.tensor([0, 2])
    trainer[1, 3] = 5                                   # past sample 1's tokens: not compared
    engine[1, 2] = -1                                   # the engine's last token: not compared
    batch = Batch.of(prompt_mask=prompt_mask, response_mask=response_mask,
                     rollout_routes=engine, old_routes=trainer)
    out = step.replay_metrics(batch, {"timing_s/step": 4.0, "moe/route_replay_s": 1.0})
    assert out["moe/route_agreement"] == pytest.approx(4 / 5)
    assert out["moe/route_replay_share"] == 0.25
    assert step.replay_metrics(Batch.of(prompt_mask=prompt_mask), {}) == {}


def test_under_r3_the_agreement_is_1_by_construction_so_r3_forces_no_pass_for_it():
    """r3 asks the engines for routes and replays them in the old-log-prob pass, so the routes
    that pass records are the engine's (the router's own only where the engine gave none, its
    last token, which is not compared): 1.0, whatever the routers would pick. r3 does not
    turn the pass on; without it the batch holds no old_routes and no agreement is logged;
    log_route_agreement turns it on."""
    rl = SimpleNamespace(router_replay="r3", log_route_agreement=False)
    assert step.engine_route_kwargs(rl) == {"with_routes": True}
    assert step.pass_replay(rl) == step.ROLLOUT_ROUTES and not step.needs_route_pass(rl)
    prompt_mask, response_mask = torch.tensor([[1, 1]]), torch.tensor([[1, 1]])
    engine = torch.tensor([[[[0, 1]], [[2, 3]], [[4, 5]], [[-1, -1]]]])   # [1, 4, 1, 2]
    no_pass = Batch.of(prompt_mask=prompt_mask, response_mask=response_mask,
                       rollout_routes=engine)
    assert "moe/route_agreement" not in step.replay_metrics(no_pass, {})
    recorded = engine.clone()
    recorded[0, 3, 0] = torch.tensor([6, 7])            # the router's own, last token
    replayed = Batch.of(prompt_mask=prompt_mask, response_mask=response_mask,
                        rollout_routes=engine, old_routes=recorded)
    assert step.replay_metrics(replayed, {})["moe/route_agreement"] == 1.0
    assert step.needs_route_pass(SimpleNamespace(router_replay="r3", log_route_agreement=True))


def test_the_tiny_moe_default_under_r3_skips_the_pass_unless_a_batch_feeds_several_updates():
    """grpo_tiny_moe_cpu trains one update a step, so under r3 it logs no agreement; with two
    mini batches the pass runs (as in tests/trainer/test_route_replay_r3_run.py) and records
    the routes (actor pipeline parallel size 1)."""
    from mindrl.config import ClusterResources, load_recipe
    from mindrl.trainer.grpo_trainer import GRPOTrainer

    cpu2 = ClusterResources("cpu", 2)
    one = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3"], cluster=cpu2)
    two = load_recipe("grpo_tiny_moe_cpu", ["rl_config.router_replay=r3",
                                            "rl_config.mini_batch_size=4"], cluster=cpu2)
    assert not GRPOTrainer(one)._needs_old_log_probs()
    assert GRPOTrainer(two)._needs_old_log_probs() and step.records_routes(two)
