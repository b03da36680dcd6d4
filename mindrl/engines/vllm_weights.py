"""How weights get into a running vLLM model, worker side (functions run by ``collective_rpc``).

Three loaders, picked once per engine by `load_mode`:

- ``in_place`` (CPU, plain linears): every weight vLLM computes with is a plain parameter, so a
  load is ``model.load_weights``: one copy per tensor through vLLM's own weight loaders.
- ``packed`` (CPU, vLLM's default oneDNN linears, infer TP 1): `load_packed` hands each linear
  its fused weight as a view of the caller's buffer (the parts of a fused module sit side by
  side in the resharder's bucket, so no copy) and lets vLLM's own post-processing pack it
  for oneDNN; embeddings, heads and norms are copied. The one pass over the bytes is the
  oneDNN pack itself.
- ``reload`` (everything else: GPU, NPU, quantized or unknown modules, infer TP > 1): vLLM's
  ``reload_weights``, which materialises each layer, runs its weight loaders and
  post-processes it.

Module structure comes from vLLM itself (``packed_modules_mapping``, ``output_partition_sizes``),
as in `weight_fingerprint.vllm_view`, never from mindrl/ckpt/mapping.py.
"""

from __future__ import annotations

import logging
import math
from typing import Dict, Iterable, List, Sequence, Tuple

import torch

from mindrl import device

NamedTensors = Iterable[Tuple[str, torch.Tensor]]


def model_dtype(worker) -> torch.dtype:
    return next(worker.model_runner.get_model().parameters()).dtype


_CPU_PLAIN_LINEAR = {"on": False}


def use_plain_cpu_linears() -> None:
    """Keep the CPU build's linear and output-head weights as plain torch tensors.

    vLLM's CPU build repacks every linear weight into a oneDNN handler at load time and frees
    the weight, so every weight update repacks (about 2 GB/s on one core). With plain weights
    (``torch.nn.functional.linear``) a weight update is one copy into vLLM's own parameters,
    but decode-sized GEMMs are slower (about 2x at 8 sequences, 5-10% at 64: see `VLLMEngine`).
    The patch is process-wide and must be in place before the model is built; other layer
    kinds keep vLLM's dispatch.
    """
    import vllm.model_executor.layers.utils as vllm_utils

    if _CPU_PLAIN_LINEAR["on"]:
        return
    original = vllm_utils.dispatch_cpu_unquantized_gemm

    def dispatch(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or weight.ndim != 2:
            return original(layer, remove_weight)
        layer.cpu_linear = torch.nn.functional.linear
        layer._mindrl_plain_weight = True

    dispatch.__wrapped__ = original
    vllm_utils.dispatch_cpu_unquantized_gemm = dispatch
    _CPU_PLAIN_LINEAR["on"] = True


def _modules_with_weights(model):
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            yield name, module


def load_mode(worker) -> str:
    """``in_place``, ``packed`` or ``reload`` (see the module docstring) for this model."""
    from vllm.distributed import get_tensor_model_parallel_world_size
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod, VocabParallelEmbedding)

    if not device.vllm_cpu_build():   # GPU/NPU: vLLM's reload (they post-process weights)
        return "reload"
    model = worker.model_runner.get_model()
    plain = packed = True
    for _, module in _modules_with_weights(model):
        method = getattr(module, "quant_method", None)
        if isinstance(module, LinearBase):
            if not isinstance(method, UnquantizedLinearMethod):
                return "reload"
            is_plain = getattr(module, "_mindrl_plain_weight", False)
            plain, packed = plain and is_plain, packed and not is_plain
        elif isinstance(module, VocabParallelEmbedding):
            if not isinstance(method, UnquantizedEmbeddingMethod):
                return "reload"
            plain = plain and getattr(module, "_mindrl_plain_weight", not hasattr(module,
                                                                                  "cpu_linear"))
        elif method is not None:
            return "reload"
    if plain and not any(p.numel() == 0 or p.is_meta for p in model.parameters()):
        return "in_place"
    return "packed" if packed and get_tensor_model_parallel_world_size() == 1 else "reload"


def load_in_place(worker, weights: NamedTensors) -> None:
    """Straight into vLLM's parameters (their weight loaders shard and fuse): valid only in
    ``in_place`` mode. A tied output head shares the embedding's tensor."""
    model = worker.model_runner.get_model()
    with torch.no_grad():
        model.load_weights(weights)


def _side_by_side(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The row-wise concatenation of `parts`: a view when they already lie one after the other
    in one storage (the resharder's bucket), else a copy."""
    first = parts[0]
    contiguous = all(p.is_contiguous() for p in parts)
    adjacent = contiguous and all(
        b.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        and b.storage_offset() == a.storage_offset() + a.numel()
        for a, b in zip(parts, parts[1:]))
    if not adjacent:
        return torch.cat(list(parts))
    rows = sum(p.shape[0] for p in parts)
    return torch.as_strided(first, (rows, *first.shape[1:]), first.stride(),
                            first.storage_offset())


def _copy_rows(param: torch.Tensor, src: torch.Tensor) -> None:
    """Into a (possibly vocab-padded) parameter; padding rows are zeroed as vLLM's loader does."""
    rows = src.shape[0]
    param[:rows].copy_(src)
    if param.dim() and param.shape[0] > rows:
        param[rows:].zero_()


def _load_module(module, mod_name: str, fused, by_name) -> None:
    from torch.nn import Parameter
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    prefix, _, leaf = mod_name.rpartition(".")
    prefix = prefix + "." if prefix else ""
    if isinstance(module, LinearBase):
        parts = [prefix + part for part in fused.get(leaf, [leaf])]
        if getattr(module, "bias", None) is not None:
            module.bias.copy_(torch.cat([by_name[p + ".bias"] for p in parts]))
        weight = _side_by_side([by_name[p + ".weight"] for p in parts])
        module.weight = Parameter(weight, requires_grad=False)
        module.quant_method.process_weights_after_loading(module)   # packs, then frees it
        kept = module.weight
        if kept.numel() and kept.untyped_storage().data_ptr() == \
                weight.untyped_storage().data_ptr():
            # A layer that computes with the weight itself (no pack) must not keep a view of
            # the caller's buffer, which the next bucket overwrites.
            module.weight = Parameter(kept.detach().clone(), requires_grad=False)
        return
    for pname, param in module.named_parameters(recurse=False):
        _copy_rows(param.data, by_name[f"{prefix}{leaf}.{pname}"])
    if isinstance(module, ParallelLMHead):
        module.quant_method.process_weights_after_loading(module)
    elif hasattr(module, "cpu_linear"):
        # An input embedding only looks rows up; the oneDNN copy vLLM made of it at start-up
        # is never used and would now be stale: drop it (and its memory).
        del module.cpu_linear


def load_packed(worker, weights: NamedTensors, modules: List[str]) -> None:
    """``packed`` mode: whole modules (every tensor of each listed module) into vLLM."""
    model = worker.model_runner.get_model()
    fused = getattr(model, "packed_modules_mapping", None) or {}
    by_name: Dict[str, torch.Tensor] = dict(weights)
    with torch.no_grad():
        for mod_name in modules:
            try:
                _load_module(model.get_submodule(mod_name), mod_name, fused, by_name)
            except Exception as exc:
                raise RuntimeError(f"loading vLLM module {mod_name}: {type(exc).__name__}: "
                                   f"{exc}") from exc
    _refresh_tied_heads(model, modules)


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
    _refresh_tied_heads(worker.model_runner.get_model(), loaded_modules)


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
    load_in_place(worker, weights)


# load mode -> loader(worker, weights, names of the vLLM modules they fill)
LOADERS = {"in_place": _load_in_place, "packed": load_packed, "reload": reload_weights}


def load_from_file(worker, path: str, numel: int, dtype: torch.dtype,
                   entries: Sequence[Tuple[str, int, Tuple[int, ...]]], mode: str,
                   modules: List[str]) -> None:
    """Worker side of a load from a shared file (the resharder's bucket in /dev/shm, or the
    engine's staging file): each TP worker maps the file itself, so only names, offsets and
    shapes cross processes, and vLLM's loaders cut each worker's shards from the full
    tensors. The last two files stay mapped until `release_files` (the resharder alternates
    two buffers). A failure names the tensor being loaded."""
    mapped = worker.__dict__.setdefault("_mindrl_mapped", {})
    flat = mapped.get(path)
    if flat is None or flat.numel() < numel:
        mapped.pop(path, None)
        while len(mapped) >= 2:
            mapped.pop(next(iter(mapped)))
        flat = mapped[path] = torch.from_file(path, shared=True, size=numel, dtype=dtype)
    last = [None]

    def tensors():
        for name, offset, shape in entries:
            last[0] = name
            yield name, flat[offset:offset + math.prod(shape)].view(shape)

    try:
        LOADERS[mode](worker, tensors(), modules)
    except Exception as exc:
        where = f" at {last[0]!r}" if last[0] else ""
        raise RuntimeError(f"loading{where}: {type(exc).__name__}: {exc}") from exc


def release_files(worker, path=None) -> None:
    """Unmap one file `load_from_file` keeps mapped, or all of them (None)."""
    mapped = worker.__dict__.setdefault("_mindrl_mapped", {})
    if path is None:
        mapped.clear()
    else:
        mapped.pop(path, None)


# ---------------------------------------------------------------------------- shared weights

def share_weights(worker, path: str):
    """Move every parameter of the model into one new shared file at `path` (``in_place`` mode
    only: plain weights, infer TP 1) and say where each HF tensor lives in it.

    Processes that map the file (the actor's ranks, weight_sync/shared_weights.py) then write new weights
    straight into the memory vLLM computes with: a weight update is one copy, made by the
    writers. Returns (numel, dtype, {HF name: (element offset, shape)}); the file is unlinked
    when this process drops it.
    """
    from vllm.distributed import get_tensor_model_parallel_world_size

    from mindrl.engines.shm_region import SharedRegion
    from mindrl.engines.weight_fingerprint import combine_views, vllm_view

    if load_mode(worker) != "in_place" or get_tensor_model_parallel_world_size() != 1:
        raise ValueError("shared weights need plain CPU weights (plain_cpu_linears) and "
                         "infer TP 1")
    model = worker.model_runner.get_model()
    params = list({id(p): p for p in model.parameters()}.values())
    dtype = params[0].dtype
    region = SharedRegion(path, sum(p.numel() for p in params), dtype, create=True)
    offset_of, offset = {}, 0
    with torch.no_grad():
        for p in params:
            view = region.tensor[offset:offset + p.numel()].view(p.shape)
            view.copy_(p.data)
            p.data = view
            offset_of[id(p)] = offset
            offset += p.numel()
    worker._mindrl_shared_weights = region          # lives as long as the model
    view = combine_views([vllm_view(worker, with_digest=False)])
    return region.numel, dtype, hf_places(model, view, offset_of)


def hf_places(model, view, offset_of) -> Dict[str, Tuple[int, Tuple[int, ...]]]:
    """{HF name: (offset, shape)} given each parameter's element offset. Names, order and
    owning modules come from `weight_fingerprint.vllm_view` (`view`): the parts of a fused
    parameter follow one another in its rows, a vocab-padded table's HF rows come first, and
    a tied output head has no name of its own."""
    rows_taken: Dict[int, int] = {}
    places: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
    for name, (shape, _, owner) in view.items():
        param = model.get_submodule(owner).get_parameter(name.rsplit(".", 1)[1])
        row = rows_taken.get(id(param), 0)
        places[name] = (offset_of[id(param)] + row * math.prod(param.shape[1:]), tuple(shape))
        rows_taken[id(param)] = row + shape[0]
    return places
