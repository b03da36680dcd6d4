"""Rank bodies for the layout-change resume tests (run under mindrl.distributed.spawn_local)."""

import torch

from mindrl.ckpt import mapping

from support.engine_worker import _engine, _step_losses


def _gather_full(engine, local_by_param):
    """{mcore full name: tensor} on every rank, from {param: local (TP-shard) tensor} held by
    this stage: gathered over TP with the mapping's rules, merged over PP."""
    from megatron.core import parallel_state as ps

    spec = engine.spec
    tp = ps.get_tensor_model_parallel_world_size()
    layers = mapping.stage_layers(spec.num_layers, ps.get_pipeline_model_parallel_rank(),
                                  ps.get_pipeline_model_parallel_world_size())
    local = {}
    for name, p in engine.module.named_parameters():
        rule, layer = mapping.rule_for(name, spec)
        full_name = rule.mcore_name(layers[layer] if layer is not None else None)
        if full_name == mapping.OUTPUT.mcore and spec.tied_embeddings:
            continue  # the last stage's copy of the tied embedding (PP > 1 only)
        t = local_by_param[p].detach().clone()
        parts = [torch.empty_like(t) for _ in range(tp)]
        torch.distributed.all_gather(parts, t, group=ps.get_tensor_model_parallel_group())
        full = mapping.gather(rule, parts)
        local[full_name] = full[:spec.vocab_size] if rule.vocab else full   # padding is per TP
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, local)
    merged = {}
    for part in gathered:
        merged.update(part)
    return merged


def _adam_state(engine, key):
    """{param: local Adam `key` tensor shaped as the param}, DP shards summed back together."""
    from megatron.core import parallel_state as ps

    out = {}
    for opt in getattr(engine.optimizer, "chained_optimizers", [engine.optimizer]):
        if hasattr(opt, "_get_model_param_range_map"):     # distributed: a DP shard per param
            for buf in opt.buffers:
                for p in buf.params:
                    full = torch.zeros(p.numel(), dtype=torch.float32)
                    try:
                        rng = opt._get_model_param_range_map(p)["param"]
                    except KeyError:
                        rng = None
                    if rng is not None and rng.size:
                        full[rng.start:rng.end] = opt._get_main_param_and_optimizer_states(p)[key]
                    torch.distributed.all_reduce(full, group=ps.get_data_parallel_group(
                        with_context_parallel=True))
                    out[p] = full.view_as(p)
        else:                                              # fp32: the params are the main params
            for group in opt.optimizer.param_groups:
                for p in group["params"]:
                    out[p] = opt.optimizer.state[p][key]
    return out


def _state(engine):
    params = _gather_full(engine, {p: p for p in engine.module.parameters()})
    moments = {k: _gather_full(engine, _adam_state(engine, k)) for k in ("exp_avg", "exp_avg_sq")}
    return params, moments


def resume_at_other_layouts(rank, world, spec, full_by_tp, batches, changes, save_dir):
    """For each (distributed optimizer?, (tp, pp) saved, (tp, pp) loaded): 3 steps at the
    first layout, saving after the first, vs the same checkpoint loaded at the second layout
    and 2 steps there. Returns on rank 0, per change: both runs' metrics, the largest
    differences of the gathered params / Adam moments right after the load and after the
    last step, the largest saved exp_avg (the scale of what a lost state would differ by),
    and the load's notes."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir

    def diff(a, b):
        params = max((a[0][n] - b[0][n]).abs().max().item() for n in a[0])
        moments = max((a[1][k][n] - b[1][k][n]).abs().max().item()
                      for k in a[1] for n in a[1][k])
        return params, moments

    out = {}
    for i, (dist_opt, src, dst) in enumerate(changes):
        engine = _engine(spec, full_by_tp, src[0], src[1], True, distributed_optimizer=dist_opt)
        straight = _step_losses(engine, batches[:1])
        engine.save_checkpoint(f"{save_dir}/{i}", 1)   # saving changes nothing: go on from here
        saved = _state(engine)
        straight += _step_losses(engine, batches[1:])
        final = _state(engine)
        ps.destroy_model_parallel()

        engine = _engine(spec, full_by_tp, dst[0], dst[1], True, distributed_optimizer=dist_opt)
        _step_losses(engine, batches[2:])   # disturb: other weights and optimizer state
        meta = engine.load_checkpoint(iteration_dir(f"{save_dir}/{i}", 1))
        loaded = _state(engine)
        resumed = straight[:1] + _step_losses(engine, batches[1:])
        after = _state(engine)
        ps.destroy_model_parallel()
        out[(dist_opt, src, dst)] = {
            "straight": straight, "resumed": resumed, "loaded_diff": diff(saved, loaded),
            "final_diff": diff(final, after), "notes": meta["notes"],
            "exp_avg_max": max(t.abs().max().item() for t in saved[1]["exp_avg"].values())}
    return out if rank == 0 else None


def old_checkpoint_at_another_layout(rank, world, spec, full_by_tp, batch, save_dir):
    """A checkpoint as written before this change (dp_reshardable optimizer, no recipe) at
    TP2, loaded at TP1 DP2: the error message on rank 0 (None if it loaded)."""
    import os

    from megatron.core import parallel_state as ps

    from mindrl.ckpt.training import checkpoint_recipe, megatron_checkpoint

    engine = _engine(spec, full_by_tp, 2, 1, True)
    _step_losses(engine, [batch])
    real = megatron_checkpoint.OPTIM_FORMAT
    megatron_checkpoint.OPTIM_FORMAT = megatron_checkpoint.LEGACY_OPTIM_FORMAT
    try:
        path = engine.save_checkpoint(save_dir, 1)
    finally:
        megatron_checkpoint.OPTIM_FORMAT = real
    if rank == 0:
        os.remove(path / checkpoint_recipe.RECIPE_FILE)
    torch.distributed.barrier()
    ps.destroy_model_parallel()

    engine = _engine(spec, full_by_tp, 1, 1, True)
    try:
        engine.load_checkpoint(path)
        error = None
    except ValueError as e:
        error = str(e)
    ps.destroy_model_parallel()
    return error if rank == 0 else None


def resume_checks(rank, world, spec, full_by_tp, batches, changes, save_dir):
    """Both bodies in one spawn (imports dominate a spawn's cost)."""
    return {"changes": resume_at_other_layouts(rank, world, spec, full_by_tp, batches, changes,
                                               f"{save_dir}/changes"),
            "old": old_checkpoint_at_another_layout(rank, world, spec, full_by_tp, batches[0],
                                                    f"{save_dir}/old")}
