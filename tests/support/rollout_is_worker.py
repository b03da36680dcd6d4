"""Rank body for the engine's rollout-correction test: one update's metrics per layout and
rollout_is mode (run under mindrl.distributed.spawn_local)."""

import dataclasses

from mindrl.data.batch import Batch

from support.engine_worker import _engine


def update_metrics(rank, world, spec, full_by_tp, batch, layouts, loss_cfg, modes):
    """{(tp, pp, mode): update metrics} on rank 0; the whole batch is one mini batch."""
    from megatron.core import parallel_state as ps

    out = {}
    for tp, pp in layouts:
        for mode in modes:
            cfg = dataclasses.replace(loss_cfg, rollout_is=mode)
            engine = _engine(spec, full_by_tp, tp, pp, True, cfg, mbs=1)
            metrics = engine.update(Batch.of(**batch), mini_batch_size=len(batch["advantages"]))
            if rank == 0:
                out[(tp, pp, mode)] = metrics
            ps.destroy_model_parallel()
    return out if rank == 0 else None
