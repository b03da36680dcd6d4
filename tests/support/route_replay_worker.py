"""Rank bodies for the routing-replay engine tests (run under mindrl.distributed.spawn_local)."""

import torch

from mindrl.algorithms import objective
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig

from support.engine_worker import _engine


def forced_routes(batch, layers, top_k, experts, seed=3):
    """Distinct random top-k ids per (sample, token, layer): routes no router would pick."""
    g = torch.Generator().manual_seed(seed)
    b, width = batch["prompt_ids"].shape[0], batch["prompt_ids"].shape[1] + \
        batch["response_ids"].shape[1]
    return torch.rand(b, width, layers, experts, generator=g).argsort(-1)[..., :top_k]


def replayed_passes(rank, world, spec, full_by_tp, batch, layouts):
    """Per layout (tp, sp, packed, max_tokens): the recorded pass, its routes replayed, forced
    routes replayed (log-probs and the routes the routers then picked), and an update's
    losses with and without replaying its own routes."""
    from megatron.core import parallel_state as ps

    out = {}
    moe = spec.moe
    layers = spec.num_layers - len(moe.dense_layers)
    for layout in layouts:
        tp, sp, packed, max_tokens = layout
        engine = _engine(spec, full_by_tp, tp, 1, True, LossConfig(), sequence_parallel=sp,
                         packed=packed, max_tokens=max_tokens)
        plain = Batch.of(**batch)
        recorded = engine.compute_log_probs(plain, with_routes=True)
        again = engine.compute_log_probs(
            Batch.of(**batch, rollout_routes=recorded["routes"]), with_routes=True,
            replay="rollout_routes")
        forced = forced_routes(batch, layers, moe.router_topk, moe.num_experts)
        moved = engine.compute_log_probs(Batch.of(**batch, rollout_routes=forced),
                                         with_routes=True, replay="rollout_routes")
        own = engine.forward_backward(Batch.of(**batch, rollout_routes=recorded["routes"]),
                                      replay="rollout_routes")
        free = engine.forward_backward(plain)
        if rank == 0:
            totals = [objective.micro_batch_totals(x, torch.device("cpu")) for x in (own, free)]
            out[layout] = {"recorded": recorded, "again": again, "forced": forced,
                           "moved": moved, "losses": totals}
        ps.destroy_model_parallel()
    return out
