"""Rank bodies for the Megatron engine tests (run under mindrl.distributed.spawn_local)."""

import multiprocessing

import torch

from mindrl.ckpt import mapping
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
from mindrl.models.builder import Parallelism, initialize_parallel


def _engine(spec, full_by_tp, tp, pp, train, loss=None, mbs=2, distributed_optimizer=True,
            sequence_parallel=False, packed=False, max_tokens=None):
    from megatron.core import parallel_state as ps

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                           sequence_parallel=sequence_parallel)
    initialize_parallel(parallel)
    engine = MegatronEngine(spec, parallel, micro_batch_size=mbs, loss=loss, packed=packed,
                            max_tokens_per_micro_batch=max_tokens,
                            optim=OptimConfig(lr=1e-3, clip_grad=0.0,
                                                  use_distributed_optimizer=distributed_optimizer)
                            if train else None)
    local = mapping.stage_state_dict(full_by_tp[tp], spec, ps.get_tensor_model_parallel_rank(),
                                     tp, ps.get_pipeline_model_parallel_rank(), pp)
    engine.module.load_state_dict(local, strict=False)
    if train:  # DDP / the optimizer keep their own fp32 copies: refresh them from the params
        engine.optimizer.reload_model_params()
    return engine


def log_probs_at_layouts(rank, world, spec, full_by_tp, batch, layouts, temperature):
    """layouts: (tp, pp) or (tp, pp, sequence_parallel, packed, max_tokens)."""
    from megatron.core import parallel_state as ps

    out = {}
    for layout in layouts:
        tp, pp, sp, packed, max_tokens = (*layout, False, False, None)[:5]
        engine = _engine(spec, full_by_tp, tp, pp, False, LossConfig(temperature=temperature),
                         sequence_parallel=sp, packed=packed, max_tokens=max_tokens)
        res = engine.compute_log_probs(Batch.of(**batch), with_entropy=True)
        if rank == 0:
            out[layout] = res
        ps.destroy_model_parallel()
    return out


def full_gradients(rank, world, spec, full_by_tp, batch, tp, pp, loss_cfg, entropy_coeff=None,
                   sequence_parallel=False, packed=False, max_tokens=None, mbs=2):
    """{mcore full name: gradient} gathered over TP and PP on rank 0; `entropy_coeff` is
    passed per call (the trainer's scheduled coefficient) instead of through loss_cfg."""
    # The distributed optimizer reduce-scatters: each DP rank's buffer holds only its shard.
    engine = _engine(spec, full_by_tp, tp, pp, True, loss_cfg, distributed_optimizer=False,
                     sequence_parallel=sequence_parallel, packed=packed, max_tokens=max_tokens,
                     mbs=mbs)
    engine.forward_backward(Batch.of(**batch), entropy_coeff)
    return _gathered_gradients(rank, world, spec, engine, tp, pp)


def _gathered_gradients(rank, world, spec, engine, tp, pp):
    from megatron.core import parallel_state as ps

    pp_rank, tp_size = ps.get_pipeline_model_parallel_rank(), tp
    layers = mapping.stage_layers(spec.num_layers, pp_rank, pp)
    local = {}
    for name, p in engine.module.named_parameters():
        rule, layer = mapping.rule_for(name, spec)
        g = p.main_grad.detach().clone()
        parts = [torch.empty_like(g) for _ in range(tp_size)]
        torch.distributed.all_gather(parts, g, group=ps.get_tensor_model_parallel_group())
        full_name = rule.mcore_name(layers[layer] if layer is not None else None)
        if full_name == mapping.OUTPUT.mcore and spec.tied_embeddings:
            continue  # the last stage's copy of the tied embedding: its grad is folded in
        local[full_name] = mapping.gather(rule, parts)
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, local)
    merged = {}
    for part in gathered:
        merged.update(part)
    ps.destroy_model_parallel()
    return merged if rank == 0 else None


def _step_losses(engine, batches):
    return [engine.update(Batch.of(**b), mini_batch_size=b["response_ids"].shape[0])
            for b in batches]


def _snapshot(engine):
    from mindrl.engines.offload import optimizer_state_tensors

    params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    optim = [t.detach().clone() for t in optimizer_state_tensors(engine.optimizer)]
    return params, optim


def checkpoint_resume(rank, world, spec, full_by_tp, batches, tp, pp, save_dir):
    """Uninterrupted 3 steps vs (1 step, save, fresh engine, load, 2 steps)."""
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full_by_tp, tp, pp, True)
    straight = _step_losses(engine, batches)
    ps.destroy_model_parallel()

    engine = _engine(spec, full_by_tp, tp, pp, True)
    first = _step_losses(engine, batches[:1])
    engine.save_checkpoint(save_dir, 1)
    helpers = [p.name for p in multiprocessing.active_children()]   # none: no Manager
    saved_params, saved_optim = _snapshot(engine)
    ps.destroy_model_parallel()

    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir, latest_iteration

    fresh = _engine(spec, full_by_tp, tp, pp, True)
    _step_losses(fresh, batches[2:3])  # disturb: different weights and optimizer state
    fresh.load_checkpoint(iteration_dir(save_dir, latest_iteration(save_dir)))
    loaded_params, loaded_optim = _snapshot(fresh)
    params_equal = all(torch.equal(saved_params[n], loaded_params[n]) for n in saved_params)
    optim_equal = (len(saved_optim) == len(loaded_optim)
                   and all(torch.equal(a, b) for a, b in zip(saved_optim, loaded_optim)))
    resumed = first + _step_losses(fresh, batches[1:])
    ps.destroy_model_parallel()
    return {"straight": straight, "resumed": resumed, "params_equal": params_equal,
            "optim_equal": optim_equal, "helpers": helpers}


def offload_roundtrip(rank, world, spec, full_by_tp, batches, tp, pp):
    """Training with an offload/onload between steps equals training without."""
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full_by_tp, tp, pp, True)
    straight = _step_losses(engine, batches)
    ps.destroy_model_parallel()

    engine = _engine(spec, full_by_tp, tp, pp, True)
    out, freed, emptied = [], [], []
    for b in batches:
        out += _step_losses(engine, [b])
        freed.append(engine.offload())
        emptied.append(all(p.untyped_storage().nbytes() == 0 for p in engine.module.parameters()))
        engine.onload()
    ps.destroy_model_parallel()
    return {"straight": straight, "offloaded": out, "freed": freed, "emptied": emptied}


def gradients_under_plans(rank, world, spec, full_by_tp, batch, loss_cfgs, plans):
    """{(loss_agg_mode, plan): {mcore name: gradient}} on rank 0, one engine per pair; a plan
    is (tp, packed, micro_batch_size, max_tokens): TP1 in this world of 2 is DP2."""
    import dataclasses

    out = {}
    for cfg in loss_cfgs:
        for plan in plans:
            tp, packed, mbs, max_tokens = plan
            out[(cfg.loss_agg_mode, plan)] = full_gradients(
                rank, world, spec, full_by_tp, batch, tp, 1, dataclasses.replace(cfg),
                packed=packed, max_tokens=max_tokens, mbs=mbs)
    return out if rank == 0 else None


def first_update_ratios(rank, world, spec, full_by_tp, batch, mini_batch_size, max_tokens):
    """The importance ratio exp(logp - old) of every response token of the first mini batch,
    old from an old-log-prob pass planned like the update (shuffled mini batches)."""
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full_by_tp, 1, 1, True, LossConfig(), packed=True,
                     max_tokens=max_tokens)
    layout = (mini_batch_size, True, 7)
    full = Batch.of(**{k: v for k, v in batch.items() if k != "old_log_probs"})
    old = engine.compute_log_probs(full, like_update=layout)["log_probs"]
    full.add(old_log_probs=old)
    seen = []
    token_stats = engine._token_stats

    def record(output, micro, with_entropy):
        logp, ent = token_stats(output, micro, with_entropy)
        seen.append((logp.detach(), micro["old_log_probs"], micro["response_mask"]))
        return logp, ent

    engine._token_stats = record
    from mindrl.data import rows

    first = rows.mini_batches(len(full), *layout)[0]
    engine.forward_backward(full.select(first))
    ratios = torch.cat([torch.exp(lp - o)[m.bool()] for lp, o, m in seen])
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, ratios)
    ps.destroy_model_parallel()
    return torch.cat(gathered) if rank == 0 else None
