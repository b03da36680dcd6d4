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
