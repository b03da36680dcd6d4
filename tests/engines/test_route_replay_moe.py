"""Routing replay in the Megatron engine on tiny-qwen3-moe (models/route_replay.py): routes
recorded per sample and replayed give the very log-probs, at TP1 (DP2), TP2 with sequence
parallelism and packed micro batches under a token budget; forced other routes move the
log-probs and are what the routers then pick; an update replaying its own routes computes the
same losses."""

import pytest
import torch

from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.models import route_replay

from support.engine_batch import make_batch
from support.hf_reference import reference_hf_model
from support.route_replay_worker import replayed_passes

pytestmark = pytest.mark.slow   # see tests/conftest.py


def test_replayed_routes_give_the_recorded_log_probs_and_forced_ones_move_them():
    from mindrl.ckpt import mapping

    spec = load_model_spec("tiny-qwen3-moe")
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    batch = make_batch(spec.vocab_size)
    layouts = [(1, False, False, None), (2, True, False, None), (1, False, True, 11),
               (2, True, True, 11)]
    out = spawn_local(replayed_passes, 2, spec, full_by_tp, batch, layouts)[0]
    lengths = (batch["prompt_mask"].sum(1) + batch["response_mask"].sum(1))
    keep = batch["response_mask"].bool()
    for layout in layouts:
        res = out[layout]
        recorded, again, moved = res["recorded"], res["again"], res["moved"]
        assert recorded["routes"].shape == (4, 11, 2, 2), layout
        assert torch.equal(again["log_probs"][keep], recorded["log_probs"][keep]), layout
        assert route_replay.route_agreement(again["routes"], recorded["routes"], lengths) == 1.0
        diff = (moved["log_probs"] - recorded["log_probs"])[keep].abs().max().item()
        print("route replay", layout, "forced routes move log-probs by", diff)
        assert diff > 1e-3, layout
        assert route_replay.route_agreement(moved["routes"], res["forced"], lengths) == 1.0
        # The forced routes are not the model's own.
        assert route_replay.route_agreement(recorded["routes"], res["forced"], lengths) < 0.5
        own, free = res["losses"]
        assert torch.equal(own, free), layout
