"""Rank body for the bf16 engine test (run under mindrl.distributed.spawn_local): the same
weights and batch through an fp32 engine and a bf16 one (Megatron mixed precision: bf16
params, fp32 main params in the optimizer, grads reduced in fp32)."""

import torch

from mindrl.ckpt import mapping
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
from mindrl.models.builder import Parallelism, initialize_parallel


def _engine(spec, full_by_tp, tp, params_dtype, train):
    from megatron.core import parallel_state as ps

    parallel = Parallelism(tensor_model_parallel_size=tp)
    initialize_parallel(parallel)
    engine = MegatronEngine(spec, parallel, params_dtype=params_dtype, micro_batch_size=2,
                            loss=LossConfig(),
                            optim=OptimConfig(lr=1e-3, clip_grad=1.0) if train else None)
    local = mapping.stage_state_dict(full_by_tp[tp], spec, ps.get_tensor_model_parallel_rank(),
                                     tp, 0, 1)
    engine.module.load_state_dict(local, strict=False)   # cast to the params' dtype
    if train:   # the optimizer's fp32 main params: refreshed from the loaded bf16 params
        engine.optimizer.reload_model_params()
    return engine


def _main_params(engine):
    """The optimizer's params (in bf16: its fp32 main copies, this DP rank's shards)."""
    return [p for group in engine.optimizer.param_groups for p in group["params"]]


def _pass_and_update(spec, full_by_tp, batch, tp, params_dtype):
    """Response log-probs, then one update over the whole batch: its metrics, the params'
    and the main params' dtypes, and how far each param and main param moved (max |change|)."""
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full_by_tp, tp, params_dtype, True)
    log_probs = engine.compute_log_probs(Batch.of(**batch))["log_probs"]
    before = {n: p.detach().float().clone() for n, p in engine.module.named_parameters()}
    main_before = [p.detach().clone() for p in _main_params(engine)]
    metrics = engine.update(Batch.of(**batch), mini_batch_size=batch["response_ids"].shape[0])
    moved = {n: (p.detach().float() - before[n]).abs().max().item()
             for n, p in engine.module.named_parameters()}
    main_moved = [(p.detach() - b).abs().max().item() if p.numel() else None
                  for p, b in zip(_main_params(engine), main_before)]
    out = {"log_probs": log_probs, "metrics": metrics, "moved": moved,
           "main_moved": [m for m in main_moved if m is not None],
           "param_dtypes": {p.dtype for p in engine.module.parameters()},
           "main_dtypes": {p.dtype for p in _main_params(engine)}}
    ps.destroy_model_parallel()
    return out


def bf16_against_fp32(rank, world, spec, full_by_tp, batch, tps):
    """{(tp, params_dtype): _pass_and_update(...)} on rank 0, fp32 and bfloat16 engines from
    the same weights at each TP size in `tps` (TP1 in a world of 2 is DP2)."""
    out = {(tp, dtype): _pass_and_update(spec, full_by_tp, batch, tp, dtype)
           for tp in tps for dtype in ("float32", "bfloat16")}
    return out if rank == 0 else None


def bf16_checkpoint_roundtrip(rank, world, spec, full_by_tp, batch, save_dir):
    """A bf16 engine (distributed optimizer) after one update saves; a fresh one, moved by an
    update of its own, loads it: (params equal, optimizer state equal) on rank 0."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir, latest_iteration
    from mindrl.engines.offload import optimizer_state_tensors

    def trained():
        engine = _engine(spec, full_by_tp, 1, "bfloat16", True)
        engine.update(Batch.of(**batch), mini_batch_size=batch["response_ids"].shape[0])
        return engine

    engine = trained()
    engine.save_checkpoint(save_dir, 1)
    params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    optim = [t.detach().clone() for t in optimizer_state_tensors(engine.optimizer)]
    ps.destroy_model_parallel()
    fresh = trained()
    fresh.load_checkpoint(iteration_dir(save_dir, latest_iteration(save_dir)))
    loaded = [t.detach().clone() for t in optimizer_state_tensors(fresh.optimizer)]
    out = (all(torch.equal(params[n], p) for n, p in fresh.module.named_parameters()),
           len(optim) == len(loaded) and all(torch.equal(a, b) for a, b in zip(optim, loaded)))
    ps.destroy_model_parallel()
    return out if rank == 0 else None
