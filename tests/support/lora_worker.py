"""Rank bodies for the LoRA engine tests (run under mindrl.distributed.spawn_local): the tiny
model at a layout, with or without adapters, trained a few steps on the same batches."""

import torch

from mindrl.ckpt import mapping
from mindrl.config.schema import LoraConfig
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
from mindrl.models import lora
from mindrl.models.builder import Parallelism, initialize_parallel

LORA = LoraConfig(rank=4, alpha=8.0)


def engine_at(spec, full_by_tp, tp, pp, sp=False, with_lora=True, lr=2e-2, clip_grad=1.0,
              distributed_optimizer=True, targets=None):
    from megatron.core import parallel_state as ps

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                           sequence_parallel=sp)
    initialize_parallel(parallel)
    cfg = LoraConfig(LORA.rank, LORA.alpha, target_modules=targets or LORA.target_modules)
    engine = MegatronEngine(spec, parallel, micro_batch_size=2, loss=LossConfig(kl_coef=0.0),
                            optim=OptimConfig(lr=lr, clip_grad=clip_grad,
                                              use_distributed_optimizer=distributed_optimizer),
                            lora=cfg if with_lora else None, seed=7)
    local = mapping.stage_state_dict(full_by_tp[tp], spec, ps.get_tensor_model_parallel_rank(),
                                     tp, ps.get_pipeline_model_parallel_rank(), pp)
    missing, unexpected = engine.module.load_state_dict(local, strict=False)
    assert not unexpected and all(lora.is_adapter_name(k) or k.endswith("_extra_state")
                                  for k in missing), (missing, unexpected)
    engine.optimizer.reload_model_params()
    return engine


def _log_probs(engine, batch):
    return engine.compute_log_probs(Batch.of(**batch))["log_probs"]


def train_at_layouts(rank, world, spec, full_by_tp, batches, layouts):
    """Per layout (tp, pp[, sp]): log-probs of batches[0] before training, after each step,
    with the adapters off at the end, and the merged weights' log-probs in a plain engine;
    plus what the optimizer holds and whether any base weight moved."""
    from megatron.core import parallel_state as ps

    out = {}
    for layout in layouts:
        tp, pp, sp = (*layout, False)[:3]
        engine = engine_at(spec, full_by_tp, tp, pp, sp)
        base = {n: p.detach().clone() for n, p in engine.module.named_parameters()
                if not lora.is_adapter_name(n)}
        res = {"start": _log_probs(engine, batches[0]), "steps": []}
        for b in batches:
            engine.update(Batch.of(**b), mini_batch_size=b["response_ids"].shape[0])
            res["steps"].append(_log_probs(engine, batches[0]))
        with lora.adapters_off(engine.module):
            res["off"] = _log_probs(engine, batches[0])
        res["base_moved"] = sorted(n for n, p in engine.module.named_parameters()
                                   if n in base and not torch.equal(p, base[n]))
        # What DDP keeps gradient buffers for: the parameters the optimizer is built over.
        held = {id(p) for buf in engine.model.buffers for p in buf.params}
        names = {id(p): n for n, p in engine.module.named_parameters()}
        res["optimized"] = sorted({names[i].rsplit(".", 1)[-1] for i in held if i in names})
        res["grad_buffers"] = sorted({n.rsplit(".", 1)[-1] for n, p in
                                      engine.module.named_parameters() if p.requires_grad})
        merged = lora.merged_weights(engine.module)
        res["adapted"] = len(merged)
        ps.destroy_model_parallel()
        plain = engine_at(spec, full_by_tp, tp, pp, sp, with_lora=False)
        plain.module.load_state_dict(merged, strict=False)
        res["merged"] = _log_probs(plain, batches[0])
        ps.destroy_model_parallel()
        if rank == 0:
            out[layout] = res
    return out


def base_log_probs(rank, world, spec, full_by_tp, batch):
    """The model without adapters at TP1 (the base every adapter-off pass must equal)."""
    from megatron.core import parallel_state as ps

    engine = engine_at(spec, full_by_tp, 1, 1, with_lora=False)
    out = _log_probs(engine, batch)
    ps.destroy_model_parallel()
    return out
