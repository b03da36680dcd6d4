"""How weights get into a running vLLM model, worker side (functions run by ``collective_rpc``).

Every loader ends by re-running what the platform's expert kernels prepare after a load
(`VLLMBuild.refresh_moe_layers`: vLLM's CPU MoE kernel packs experts at the first load only).

Three loaders, picked once per engine by `load_mode` (the platform's vLLM build decides,
`device.vllm_build()`): ``in_place`` and ``packed`` are the CPU build's
(platforms/cpu/vllm_loaders.py); ``reload`` (everything else: GPU, NPU, quantized or unknown
modules, infer TP > 1 with packed linears) is vLLM's ``reload_weights``, which materialises
each layer, runs its weight loaders and post-processes it.

Module structure comes from vLLM itself (``packed_modules_mapping``, ``output_partition_sizes``),
as in `vllm_fingerprint.vllm_view`, never from mindrl/ckpt/mapping/.
"""

from __future__ import annotations

import logging
from typing import List, Sequence, Tuple

import torch

from mindrl import device
from mindrl.ckpt.fingerprint import NamedTensors
from mindrl.engines.vllm_fingerprint import combine_views, vllm_view
from mindrl.platforms import device_ipc


def model_dtype(worker) -> torch.dtype:
    return next(worker.model_runner.get_model().parameters()).dtype


def name_mapper(worker):
    """The model's own renaming of checkpoint names into the engine's names (vLLM's
    ``hf_to_vllm_mapper``, e.g. Qwen2.5-VL's `model.` -> `language_model.model.`), or None.
    Its stacking rules (`q_proj` -> `qkv_proj`) are left out: the engine names the parts of
    a fused module as the checkpoint does (``packed_modules_mapping``, `vllm_view`)."""
    import dataclasses

    mapper = getattr(worker.model_runner.get_model(), "hf_to_vllm_mapper", None)
    return None if mapper is None else dataclasses.replace(mapper, orig_to_new_stacked={})


def load_mode(worker) -> str:
    """``in_place``, ``packed`` or ``reload`` (see the module docstring) for this model."""
    from vllm.distributed import get_tensor_model_parallel_world_size

    return device.vllm_build().load_mode(worker.model_runner.get_model(),
                                         get_tensor_model_parallel_world_size())


def reload_weights(worker, weights: NamedTensors, loaded_modules: List[str]) -> None:
    """vLLM's in-place reload, then `_refresh_tied_heads`."""
    # A bucket leaves most modules unloaded on purpose; vLLM warns once per module and call.
    quiet = [logging.getLogger("vllm.model_executor.model_loader.reload." + m)
             for m in ("layerwise", "inplace")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.ERROR)
    try:
        worker.reload_weights(weights_iterator=weights)
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    model = worker.model_runner.get_model()
    _refresh_tied_heads(model, loaded_modules)
    device.vllm_build().refresh_moe_layers(model, loaded_modules)


def _refresh_tied_heads(model, loaded_modules: List[str]) -> None:
    """Re-process output heads tied to a loaded module: on CPU they keep a packed copy of the
    embedding that loading the embedding does not refresh."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    loaded = {id(p) for name in loaded_modules
              for p in model.get_submodule(name).parameters(recurse=False)}
    for name, module in model.named_modules():
        if (isinstance(module, ParallelLMHead) and name not in loaded_modules
                and id(module.weight) in loaded):
            module.quant_method.process_weights_after_loading(module)


def _load_in_place(worker, weights: NamedTensors, modules: List[str]) -> None:
    model = worker.model_runner.get_model()
    device.vllm_build().load_in_place(model, weights)
    device.vllm_build().refresh_moe_layers(model, modules)


def _load_packed(worker, weights: NamedTensors, modules: List[str]) -> None:
    model = worker.model_runner.get_model()
    device.vllm_build().load_packed(model, weights, modules)
    _refresh_tied_heads(model, modules)
    device.vllm_build().refresh_moe_layers(model, modules)


# load mode -> loader(worker, weights, names of the vLLM modules they fill)
LOADERS = {"in_place": _load_in_place, "packed": _load_packed, "reload": reload_weights}


def load_from_bucket(worker, path, numel: int, dtype: torch.dtype,
                     entries: Sequence[Tuple[str, int, Tuple[int, ...]]], mode: str,
                     modules: List[str]) -> None:
    """Worker side of a load from a shared bucket: a file (the resharder's bucket in /dev/shm,
    or the engine's staging file) or a device buffer opened in place by IPC handle
    (`platforms/device_ipc.DeviceBuffer`). Each TP worker opens the bucket itself, so only
    names, offsets and shapes cross processes, and vLLM's loaders cut each worker's shards
    from the full tensors. The last two buckets stay open until `release_buckets` (the resharder
    alternates two buffers). A failure names the tensor being loaded."""
    mapped = worker.__dict__.setdefault("_mindrl_mapped", {})
    key = device_ipc.bucket_key(path)
    flat = mapped.get(key)
    if flat is None or flat.numel() < numel:
        mapped.pop(key, None)
        while len(mapped) >= 2:
            mapped.pop(next(iter(mapped)))
        flat = mapped[key] = device_ipc.open_bucket(path, numel, dtype)
    last = [None]

    def tensors():
        for name, view in device_ipc.views(flat, entries):
            last[0] = name
            yield name, view

    try:
        LOADERS[mode](worker, tensors(), modules)
        device_ipc.finish_reading(path)
    except Exception as exc:
        where = f" at {last[0]!r}" if last[0] else ""
        raise RuntimeError(f"loading{where}: {type(exc).__name__}: {exc}") from exc


def release_buckets(worker, path=None) -> None:
    """Close one bucket `load_from_bucket` keeps open, or all of them (None)."""
    mapped = worker.__dict__.setdefault("_mindrl_mapped", {})
    if path is None:
        mapped.clear()
    else:
        mapped.pop(device_ipc.bucket_key(path), None)


# ---------------------------------------------------------------------------- shared weights

def share_weights(worker, path: str):
    """Move every parameter of the model into one new shared file at `path` (``in_place`` mode
    only: plain weights, infer TP 1; the CPU build's `share_weights`) and say where each HF
    tensor lives in it: (numel, dtype, {HF name: (element offset, shape)}). The file lives as
    long as the model, until `unshare_weights`."""
    from vllm.distributed import get_tensor_model_parallel_world_size

    if load_mode(worker) != "in_place" or get_tensor_model_parallel_world_size() != 1:
        raise ValueError("shared weights need plain CPU weights (plain_cpu_linears) and "
                         "infer TP 1")
    view = combine_views([vllm_view(worker, with_digest=False)])
    region, places = device.vllm_build().share_weights(worker.model_runner.get_model(), path,
                                                       view)
    worker._mindrl_shared_weights = region          # lives as long as the model
    return region.numel, region.dtype, places


def unshare_weights(worker) -> None:
    """Remove the shared weights' file (the engine is closing: nothing computes with them)."""
    region = worker.__dict__.pop("_mindrl_shared_weights", None)
    if region is not None:
        region.close()
