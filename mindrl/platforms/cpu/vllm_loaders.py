"""How weights get into vLLM's CPU build, worker side: plain or oneDNN-packed linears, loaded
in place, packed from the caller's buffer, or shared with the actor's ranks.

vLLM's CPU build repacks every linear weight for oneDNN at load time (about 2 GB/s per core)
and frees the plain weight, so `model.load_weights` fails there and its ``reload_weights``
re-runs the pack for every layer. Two faster loaders, picked once per engine by `load_mode`:

- ``in_place`` (plain linears, `use_plain_linears`): every weight vLLM computes with is a plain
  parameter, so a load is ``model.load_weights``: one copy per tensor through vLLM's own
  weight loaders; `share_weights` then puts those parameters in a /dev/shm file that the
  actor's ranks write straight into.
- ``packed`` (vLLM's default oneDNN linears, infer TP 1): `load_packed` hands each linear its
  fused weight as a view of the caller's buffer (the parts of a fused module sit side by side
  in the resharder's bucket, so no copy) and lets vLLM's own post-processing pack it for
  oneDNN; embeddings, heads and norms are copied. The one pass over the bytes is the pack.

Everything else (quantized or unknown modules, infer TP > 1 with packed linears) goes through
vLLM's reload (engines/vllm_weights.py). Expert layers (MoE) load through vLLM's expert loader
in every mode, and every mode re-packs them afterwards (vllm_experts.py). Functions here take vLLM's model (and what else they
need) as arguments; engines/ reaches them through `device.vllm_build()`.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence, Tuple

import torch

from mindrl.shared_memory import SharedRegion

Places = Dict[str, Tuple[int, Tuple[int, ...]]]    # HF name -> (element offset, shape)

_PLAIN_LINEARS = {"on": False}     # the patch below is process-wide: put in place once


def use_plain_linears() -> None:
    """Keep the CPU build's linear and output-head weights as plain torch tensors.

    vLLM's CPU build repacks every linear weight into a oneDNN handler at load time and frees
    the weight, so every weight update repacks (about 2 GB/s on one core). With plain weights
    (``torch.nn.functional.linear``) a weight update is one copy into vLLM's own parameters,
    but decode-sized GEMMs are slower (about 2x at 8 sequences, 5-10% at 64: see `VLLMEngine`).
    The patch is process-wide and must be in place before the model is built; other layer
    kinds keep vLLM's dispatch.
    """
    import vllm.model_executor.layers.utils as vllm_utils

    if _PLAIN_LINEARS["on"]:
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
    _PLAIN_LINEARS["on"] = True


def _modules_with_weights(model):
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            yield name, module


def _is_experts(module) -> bool:
    """An unquantized vLLM expert layer (w13 / w2 of every expert)."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod)

    return isinstance(module, RoutedExperts) and isinstance(
        getattr(module, "quant_method", None), UnquantizedFusedMoEMethod)


def load_mode(model, tp_size: int) -> str:
    """``in_place``, ``packed`` or ``reload`` (see the module docstring) for vLLM's `model` on
    a worker of an infer-TP `tp_size` engine. Expert layers fit every mode: each loader
    writes them through vLLM's own expert loader, then re-packs them for the CPU kernel
    (vllm_experts.refresh_moe_layers)."""
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod, VocabParallelEmbedding)

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
        elif method is not None and not _is_experts(module):
            return "reload"
    if plain and not any(p.numel() == 0 or p.is_meta for p in model.parameters()):
        return "in_place"
    return "packed" if packed and tp_size == 1 else "reload"


def load_in_place(model, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
    """Straight into vLLM's parameters (their weight loaders shard and fuse): valid only in
    ``in_place`` mode. A tied output head shares the embedding's tensor."""
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
    if _is_experts(module):
        # vLLM's expert loader (a generator) takes names relative to the layer (its
        # `layer_name`); the caller re-packs the layer for the kernel afterwards.
        base = module.layer_name + "."
        for _ in module.load_weights([(name[len(base):], t) for name, t in by_name.items()
                                      if name.startswith(base)]):
            pass
        return
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


def load_packed(model, weights: Iterable[Tuple[str, torch.Tensor]], modules: List[str]) -> None:
    """``packed`` mode: whole modules (every tensor of each listed module) into vLLM. Output
    heads tied to a loaded module keep their old packed copy: the caller re-processes them."""
    fused = getattr(model, "packed_modules_mapping", None) or {}
    by_name: Dict[str, torch.Tensor] = dict(weights)
    with torch.no_grad():
        for mod_name in modules:
            try:
                _load_module(model.get_submodule(mod_name), mod_name, fused, by_name)
            except Exception as exc:
                raise RuntimeError(f"loading vLLM module {mod_name}: {type(exc).__name__}: "
                                   f"{exc}") from exc


def share_weights(model, path: str, view) -> Tuple[SharedRegion, Places]:
    """Move every parameter of `model` into one new shared file at `path` (``in_place`` mode,
    infer TP 1: the caller checks) and say where each HF tensor lives in it (`view`: the
    worker's combined ``vllm_view``, engines/vllm_fingerprint.py).

    Processes that map the file (the actor's ranks, weight_sync/shared_weights.py) then write
    new weights straight into the memory vLLM computes with: a weight update is one copy, made
    by the writers. The region must live as long as the model; its creator removes the file
    (`SharedRegion.close`).

    A model with expert layers is refused: the CPU MoE kernel computes with a packed copy of
    the experts that it makes after each load (vllm_experts.py), so plain bytes written into
    shared memory would never be what it computes with; such a model loads through the shm
    bucket, in ``in_place`` mode (plain linears) or ``packed``.
    """
    experts = [name for name, module in model.named_modules() if _is_experts(module)]
    if experts:
        raise NotImplementedError(
            f"shared weights: vLLM's CPU MoE kernel repacks the expert layers ({experts[0]}, "
            f"...) after every load, so writers cannot write into what it computes with; set "
            f"generate_config.cpu_weights: packed")
    params = list({id(p): p for p in model.parameters()}.values())
    dtype = params[0].dtype
    region = SharedRegion(path, sum(p.numel() for p in params), dtype, create=True)
    offset_of, offset = {}, 0
    with torch.no_grad():
        for p in params:
            view_of_p = region.tensor[offset:offset + p.numel()].view(p.shape)
            view_of_p.copy_(p.data)
            p.data = view_of_p
            offset_of[id(p)] = offset
            offset += p.numel()
    return region, hf_places(model, view, offset_of)


def hf_places(model, view, offset_of) -> Places:
    """{HF name: (offset, shape)} given each parameter's element offset. Names, order and
    owning modules come from `view` (vLLM's own, engines/vllm_fingerprint.py): the parts of a
    fused parameter follow one another in its rows, a vocab-padded table's HF rows come first,
    and a tied output head has no name of its own."""
    rows_taken: Dict[int, int] = {}
    places: Places = {}
    for name, (shape, _, owner) in view.items():
        param = model.get_submodule(owner).get_parameter(name.rsplit(".", 1)[1])
        row = rows_taken.get(id(param), 0)
        places[name] = (offset_of[id(param)] + row * math.prod(param.shape[1:]), tuple(shape))
        rows_taken[id(param)] = row + shape[0]
    return places
