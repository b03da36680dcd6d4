"""Training checkpoints of a Megatron engine through dist_checkpointing (torch_dist).

Layout (Megatron-LM's, so MindSpeed users recognise it):
    <save>/iter_0000010/               one complete checkpoint (model, optimizer, rng, meta)
    <save>/latest_checkpointed_iteration.txt   "10": written last, only after the rename
A checkpoint is written into <save>/.tmp_iter_0000010 and renamed into place, so `latest`
only ever names a complete checkpoint and a crash leaves the previous one loadable.
"""

from __future__ import annotations

import os
import queue
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from mindrl import device
from mindrl.ckpt.mcore_io import MODEL_INFO
from mindrl.ckpt.training import checkpoint_recipe, checkpoint_vocab, layout_change

LATEST = "latest_checkpointed_iteration.txt"
# The distributed optimizer's checkpoint format. fully_reshardable stores Adam's moments in
# model space (one tensor per parameter, named as the model's), so a save loads at any
# TP/PP/DP; dp_reshardable (what checkpoints before it used) stores flat DP buffers that only
# load at the TP/PP they were saved at. The non-distributed optimizer always saves in model
# space.
OPTIM_FORMAT = "fully_reshardable"
LEGACY_OPTIM_FORMAT = layout_change.LEGACY_OPTIM_FORMAT
MODEL_SPACE = "model_space"


def iteration_dir(save_dir, iteration: int) -> Path:
    return Path(save_dir) / f"iter_{iteration:07d}"


def latest_iteration(save_dir) -> Optional[int]:
    """The iteration the marker names, or None when there is no complete checkpoint."""
    marker = Path(save_dir) / LATEST
    if not marker.is_file():
        return None
    text = marker.read_text().strip()
    if text == "release":
        return 0
    iteration = int(text)
    return iteration if iteration_dir(save_dir, iteration).is_dir() else None


def _is_rank0() -> bool:
    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _rng_object(ps):
    from megatron.core import tensor_parallel
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    state = {"rng": device.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
    pp, tp = ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()
    return ShardedObject("rng_state", state,
                         (ps.get_pipeline_model_parallel_world_size(),
                          ps.get_tensor_model_parallel_world_size()),
                         (pp, tp), replica_id=ps.get_data_parallel_rank())


def ensure_optimizer_state(optimizer) -> None:
    """Give a fresh torch Adam its (zero) state, `step` included: Megatron's distributed
    optimizer reads one common step from the state before it can describe what to load."""
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(opt, "optimizer", opt)
        for group in inner.param_groups:
            for p in group["params"]:
                state = inner.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_avg_sq"] = torch.zeros_like(p.data)
                    state["step"] = torch.zeros((), dtype=torch.float32)


def _saved_adam_step(loaded_optim) -> Optional[float]:
    """The common Adam step stored in the checkpoint's param groups (or common_step)."""
    if isinstance(loaded_optim, dict):
        for group in loaded_optim.get("param_groups", []):
            if group.get("step") is not None:
                return float(group["step"])
        common = loaded_optim.get("state", {}).get("common_step") if isinstance(
            loaded_optim.get("state"), dict) else None
        if common is not None:
            return float(common)
        values = loaded_optim.values()
    elif isinstance(loaded_optim, (list, tuple)):
        values = loaded_optim
    else:
        return None
    for value in values:
        step = _saved_adam_step(value)
        if step is not None:
            return step
    return None


def _restore_adam_steps(optimizer, step: Optional[float]) -> None:
    """One `step` tensor per param, holding the saved value. Megatron's distributed optimizer
    (torch Adam path) hands every param one shared tensor, which Adam then increments once per
    param, and its parameter-state load can leave the counter at 0."""
    if step is None:
        return
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(opt, "optimizer", opt)
        for state in inner.state.values():
            if "step" in state:
                state["step"] = torch.tensor(step, dtype=torch.float32)


def sharded_state(module, optimizer, ps, with_optim: bool, with_rng: bool,
                  is_loading: bool, optim_format: Optional[str] = None) -> Dict[str, Any]:
    state: Dict[str, Any] = {"model": module.sharded_state_dict()}
    if with_optim and optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(
            state["model"], is_loading=is_loading,
            metadata={"distrib_optim_sharding_type": optim_format or OPTIM_FORMAT})
    if with_rng:
        state["rng_state"] = _rng_object(ps)
    return state


def current_layout(ps) -> Dict[str, int]:
    return checkpoint_recipe.layout(ps.get_tensor_model_parallel_world_size(),
                                    ps.get_pipeline_model_parallel_world_size(),
                                    ps.get_data_parallel_world_size(),
                                    ps.get_expert_model_parallel_world_size(),
                                    ps.get_expert_tensor_parallel_world_size())


def _format_of(optimizer) -> str:
    distributed = any(hasattr(o, "load_parameter_state_from_fully_reshardable")
                      for o in getattr(optimizer, "chained_optimizers", [optimizer]))
    return OPTIM_FORMAT if distributed else MODEL_SPACE


def save(module, optimizer, scheduler, save_dir, iteration: int, extra: Dict[str, Any],
         save_optim: bool = True, save_rng: bool = True,
         recipe: Optional[Dict[str, Any]] = None, model_info: Optional[str] = None) -> Path:
    """Collective: every rank of the role calls it. `recipe` (model shape, batch sizes) is
    written beside the tensors with the layout and optimizer format (checkpoint_recipe);
    `model_info` (mcore_io.ModelInfo's JSON) makes the checkpoint one the converter reads, so
    a trained model goes back to HF with the mcore2hf scripts."""
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    final = iteration_dir(save_dir, iteration)
    tmp = final.with_name(".tmp_" + final.name)
    if _is_rank0():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    _keep_write_results_in_process()
    if save_optim and optimizer is not None:    # an optimizer that has not stepped yet (every
        ensure_optimizer_state(optimizer)       # update skipped) has no state to describe
    state = sharded_state(module, optimizer, ps, save_optim, save_rng, is_loading=False)
    state["iteration"] = iteration
    state["extra"] = extra
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    dist_checkpointing.save(state, str(tmp))
    _barrier()
    if _is_rank0():
        if model_info is not None:
            (tmp / MODEL_INFO).write_text(model_info)
        checkpoint_recipe.write_recipe(tmp, {
            **(recipe or {}), "layout": current_layout(ps),
            "optimizer_format": _format_of(optimizer) if optimizer is not None else None})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_atomically(Path(save_dir) / LATEST, str(iteration))
    _barrier()
    return final


def _keep_write_results_in_process() -> None:
    """Our saves are synchronous: torch_dist's writer runs in the saving process, so its
    results need no queue between processes. Megatron's default one lives in a Manager
    process spawned at a process's first save, which then imports torch to unpickle them:
    about 2 s of every run's first save, a tiny model's whole save four times over."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", False) is None:
        filesystem_async._results_queue = queue.Queue()


def _optimizer_pairs(optimizer, loaded) -> List[Tuple[Any, Any]]:
    """(optimizer, its loaded state) for each chained optimizer (Megatron nests one level)."""
    chained = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(chained) == 1:
        return [(chained[0], loaded)]
    return list(zip(chained, (v for _, v in sorted(loaded.items()))))


def _load_optimizer(optimizer, loaded) -> None:
    """optimizer.load_state_dict, except that a fully_reshardable parameter state goes
    through `_load_param_state`."""
    for opt, state in _optimizer_pairs(optimizer, loaded):
        if not (isinstance(state, dict)
                and state.get("param_state_sharding_type") == "fully_reshardable"):
            opt.load_state_dict(state)
            continue
        param_state = state.pop("param_state")
        state.pop("param_state_sharding_type")
        opt.load_state_dict(state)          # param groups (lr, step, ...) only
        _load_param_state(opt, param_state)


def _load_param_state(opt, param_state) -> None:
    """A distributed optimizer's fully_reshardable moments, the torch Adam `step` entries set
    aside meanwhile: Megatron copies every per-param state entry from the checkpoint's
    model-space tensors, which hold no `step` (KeyError 'step')."""
    inner = opt.optimizer.state
    steps = {p: s.pop("step") for p, s in inner.items() if "step" in s}
    opt.load_parameter_state_from_fully_reshardable(param_state)
    for p, step in steps.items():
        inner[p]["step"] = step


def _rename_optimizer_keys(request, saved_keys) -> None:
    """Point every requested optimizer tensor at the saved key of the same parameter state:
    across EP 1 <-> EP > 1 the keys differ only by Megatron's `chained_N.` prefix
    (`optimizer.state.exp_avg.<param>` vs `chained_1.optimizer.state.exp_avg.<param>`)."""
    marker = "optimizer.state."
    saved = {key.split(marker, 1)[1]: key for key in saved_keys if marker in key}

    def visit(node):
        if isinstance(node, (dict, list, tuple)):
            for child in (node.values() if isinstance(node, dict) else node):
                visit(child)
            return
        key = getattr(node, "key", None)
        if isinstance(key, str) and marker in key:
            found = saved.get(key.split(marker, 1)[1])
            if found is None:
                raise ValueError(f"the checkpoint holds no optimizer state for {key!r}")
            node.key = found

    visit(request)


def _load_rechained_optimizer(optimizer, loaded) -> None:
    """Adam's moments saved by another chain of optimizers (EP 1 <-> EP > 1), read under the
    current chain's keys (`_rename_optimizer_keys`): each current optimizer loads the param
    state at its own place; its parameter groups stay as built from the run's settings (the
    saved Adam step is restored after, `_restore_adam_steps`)."""
    chained = getattr(optimizer, "chained_optimizers", [optimizer])
    states = [loaded] if len(chained) == 1 else [loaded[i] for i in range(len(chained))]
    for opt, state in zip(chained, states):
        _load_param_state(opt, state["param_state"])


def _saved_shapes(ckpt_dir) -> Dict[str, Tuple[int, ...]]:
    """{tensor key: global shape} from the checkpoint's (safely read) DCP metadata."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from mindrl.ckpt.safe_metadata import load_metadata

    keys = load_metadata(Path(ckpt_dir) / ".metadata").state_dict_metadata
    return {k: tuple(md.size) for k, md in keys.items() if isinstance(md, TensorStorageMetadata)}


def saved_layout_and_format(ckpt_dir) -> Tuple[Optional[Dict[str, int]], str]:
    """(layout, optimizer format) a checkpoint was saved with: from its recipe, or for an
    older checkpoint from its tensor keys (layout None when they do not tell)."""
    from mindrl.ckpt.safe_metadata import load_metadata

    recipe = checkpoint_recipe.read_recipe(ckpt_dir)
    if recipe is not None and recipe.get("layout"):
        return recipe["layout"], recipe.get("optimizer_format") or MODEL_SPACE
    keys = load_metadata(Path(ckpt_dir) / ".metadata").state_dict_metadata
    fmt = (LEGACY_OPTIM_FORMAT if any(k.startswith("optimizer.distributed.") for k in keys)
           else MODEL_SPACE)
    for key in keys:   # ShardedObject "rng_state" of shape (PP, TP): rng_state/shard_p.t_PP.TP
        if key.startswith("rng_state/shard_"):
            pp, tp = key.rsplit("_", 1)[1].split(".")
            return {"tp": int(tp), "pp": int(pp)}, fmt
    return None, fmt


def load(module, optimizer, scheduler, ckpt_dir, load_optim: bool = True,
         load_rng: bool = True) -> Dict[str, Any]:
    """Restore model (+ optimizer, rng, scheduler) in place, at this process's layout
    whatever the saved one (layout_change); returns iteration, extra and notes (what a
    layout change left fresh)."""
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.safe_metadata import check_checkpoint_metadata

    check_checkpoint_metadata(ckpt_dir)  # restricted unpickler first: Megatron's is not
    load_optim = load_optim and optimizer is not None
    saved_layout, saved_format = saved_layout_and_format(ckpt_dir)
    plan = layout_change.plan_load(saved_layout, saved_format, current_layout(ps), load_optim,
                                   load_rng, ckpt_dir)
    load_rng = plan.load_rng
    if load_optim:
        ensure_optimizer_state(optimizer)
    # Request what was saved: a legacy DP-bucket state (same TP/PP), else model space.
    fmt = LEGACY_OPTIM_FORMAT if saved_format == LEGACY_OPTIM_FORMAT else OPTIM_FORMAT
    request = sharded_state(module, optimizer, ps, load_optim, load_rng, is_loading=True,
                            optim_format=fmt)
    # Vocab rows can differ between layouts (padding is a multiple of TP): read those shared.
    saved_shapes = _saved_shapes(ckpt_dir)
    if plan.rename_optimizer_keys:
        _rename_optimizer_keys(request["optimizer"], saved_shapes)
    fixes = checkpoint_vocab.fit_vocab_rows(request, saved_shapes)
    loaded = dist_checkpointing.load(request, str(ckpt_dir))
    checkpoint_vocab.finish_vocab_rows(loaded, fixes)
    module.load_state_dict(loaded["model"], strict=False)
    if load_optim:
        # fp32: the optimizer's main params are views of the model params
        # (docs/platforms.md#megatron-core-on-cpu).
        step = _saved_adam_step(loaded["optimizer"])
        with torch.no_grad():
            if plan.rename_optimizer_keys:
                _load_rechained_optimizer(optimizer, loaded["optimizer"])
            else:
                _load_optimizer(optimizer, loaded["optimizer"])
        _restore_adam_steps(optimizer, step)
        if scheduler is not None and "scheduler" in loaded:
            scheduler.load_state_dict(loaded["scheduler"])
    if load_rng and "rng_state" in loaded:
        from megatron.core import tensor_parallel

        device.set_rng_state(loaded["rng_state"]["rng"])
        tensor_parallel.get_cuda_rng_tracker().set_states(loaded["rng_state"]["tracker"])
    return {"iteration": loaded.get("iteration", 0), "extra": loaded.get("extra", {}),
            "notes": list(plan.notes)}
