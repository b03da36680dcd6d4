"""LoRA adapters on Megatron's tensor-parallel linear layers (Megatron-Bridge's PEFT needs
Transformer Engine and transformers < 5, so it does not install beside this stack).

Each targeted layer keeps its class's behaviour and its parameter names (`...linear_qkv.weight`
stays what the checkpoints, the converter and the weight sync know); `apply_lora` swaps the
instance's class for a subclass that adds `scale * B(A(x))` to its output and registers two
parameters beside the weight, `lora_a` [rank, in] and `lora_b` [out, rank]. The split follows
the layer's own:

- column-parallel (qkv, fc1; output rows split over TP): A whole on every rank, B split by rows.
  A's input gradient is summed over TP by `copy_to_tensor_model_parallel_region` (under
  sequence parallelism: A's output is gathered along the sequence, its gradient reduce-scattered,
  and A's weight gradient summed over TP as a layer norm's is).
- row-parallel (proj, fc2; input columns split): A split by columns, its partial products
  summed over TP (`reduce_from_tensor_model_parallel_region`, or reduce-scattered along the
  sequence), B whole on every rank.

B starts at zero, so a fresh adapter's model is the base model exactly; A is drawn from a
generator seeded by the layer's global name, whole and then split, so TP=2 starts where TP=1
does. Adapters compute in fp32 whatever the base's dtype.
"""

from __future__ import annotations

import contextlib
import math
import re
import zlib
from dataclasses import dataclass
from typing import Dict, Iterator, List, Sequence, Tuple

import torch

from mindrl.config.names import LORA_TARGETS as TARGETS

ADAPTER_PARAMS = ("lora_a", "lora_b")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    dropout: float = 0.0
    target_modules: Tuple[str, ...] = TARGETS

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def is_adapter_name(name: str) -> bool:
    """Whether a parameter (or state-dict key) name is an adapter's."""
    return name.rsplit(".", 1)[-1] in ADAPTER_PARAMS


def _adapter_delta(layer, x: torch.Tensor) -> torch.Tensor:
    from megatron.core.tensor_parallel import mappings

    x = layer.lora_dropout(x.to(layer.lora_a.dtype))
    h = torch.nn.functional.linear(x, layer.lora_a)
    group = layer.tp_group
    if layer.lora_kind == "column":
        h = (mappings.gather_from_sequence_parallel_region(h, group=group)
             if layer.sequence_parallel
             else mappings.copy_to_tensor_model_parallel_region(h, group=group))
    else:
        h = (mappings.reduce_scatter_to_sequence_parallel_region(h, group=group)
             if layer.sequence_parallel
             else mappings.reduce_from_tensor_model_parallel_region(h, group=group))
    return torch.nn.functional.linear(h, layer.lora_b) * layer.lora_scale


class _LoraMixin:
    """The added path; `lora_enabled` False gives the base layer (the reference)."""

    def forward(self, input_, *args, **kwargs):
        output, bias = super().forward(input_, *args, **kwargs)
        if not self.lora_enabled:
            return output, bias
        return output + _adapter_delta(self, input_).to(output.dtype), bias

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        axes = ({"weight": 0, "bias": 0, "lora_b": 0} if self.lora_kind == "column"
                else {"weight": 1, "lora_a": 1})
        return make_sharded_tensors_for_checkpoint(
            self.state_dict(prefix="", keep_vars=True), prefix, axes, sharded_offsets,
            tp_group=self.tp_group, dp_cp_group=metadata["dp_cp_group"])

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """This rank's shard of W + scale * B A (column: B's rows; row: A's columns), in the
        weight's dtype: what the engines get under `sync: merged`."""
        delta = (self.lora_b.float() @ self.lora_a.float()) * self.lora_scale
        return (self.weight.float() + delta).to(self.weight.dtype)


_SUBCLASSES: Dict[type, type] = {}


def _lora_class(base: type) -> type:
    if base not in _SUBCLASSES:
        _SUBCLASSES[base] = type(f"Lora{base.__name__}", (_LoraMixin, base), {})
    return _SUBCLASSES[base]


def _kind(layer) -> str:
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    if isinstance(layer, ColumnParallelLinear):
        if layer.gather_output:
            raise ValueError("LoRA on a column-parallel layer that gathers its output is not "
                             "supported")
        return "column"
    if isinstance(layer, RowParallelLinear):
        if not layer.input_is_parallel:
            raise ValueError("LoRA on a row-parallel layer whose input is not split is not "
                             "supported")
        return "row"
    raise ValueError(f"LoRA targets Megatron's parallel linear layers, not "
                     f"{type(layer).__name__}")


def _global_name(module, name: str) -> str:
    """`name` with its layer index made global (the stage's TransformerLayer.layer_number),
    so every pipeline stage seeds the same layer alike."""
    match = _LAYER.search(name)
    if match is None:
        return name
    layers = module.get_submodule(name[:match.end() - 1].rsplit(".", 1)[0])
    number = layers[int(match.group(1))].layer_number - 1
    return name[:match.start(1)] + str(number) + name[match.end(1):]


def _seeded_a(rank: int, in_features: int, seed: int, name: str) -> torch.Tensor:
    """The whole A [rank, in] as PEFT draws it (kaiming-uniform, a = sqrt(5)), from a
    generator of its own: the same on every rank and at every layout."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    bound = 1.0 / math.sqrt(in_features)       # kaiming_uniform_(a=sqrt(5)) for a linear
    return (torch.rand(rank, in_features, generator=gen, dtype=torch.float64) * 2 - 1) * bound


def target_layers(module, targets: Sequence[str]) -> List[Tuple[str, torch.nn.Module]]:
    """(name, layer) of every layer whose last name part is one of `targets` (experts and
    routers are not TARGETS; config/checks/lora.py refuses them by name)."""
    wanted = set(targets)
    return [(name, m) for name, m in module.named_modules()
            if name.rsplit(".", 1)[-1] in wanted and ".experts." not in name]


def apply_lora(module, spec: LoraSpec, seed: int = 0) -> List[str]:
    """Adapters on every targeted layer of this rank's stage, in place, every base parameter
    frozen; returns the adapted layers' names. Call before the optimizer is built (it holds
    what requires a gradient: the adapters)."""
    from megatron.core import tensor_parallel

    for p in module.parameters():
        p.requires_grad_(False)
    names = []
    for name, layer in target_layers(module, spec.target_modules):
        kind = _kind(layer)
        tp_rank, tp_size = layer.tp_group.rank(), layer.tp_group.size()
        out_local, in_local = layer.weight.shape
        in_full = in_local * (tp_size if kind == "row" else 1)
        a = _seeded_a(spec.rank, in_full, seed, _global_name(module, name))
        if kind == "row":
            a = a.chunk(tp_size, dim=1)[tp_rank]
        dev = layer.weight.device
        lora_a = torch.nn.Parameter(a.to(device=dev, dtype=torch.float32).contiguous())
        lora_b = torch.nn.Parameter(torch.zeros(out_local, spec.rank, device=dev,
                                                dtype=torch.float32))
        split, whole = (lora_b, lora_a) if kind == "column" else (lora_a, lora_b)
        tensor_parallel.set_tensor_model_parallel_attributes(
            split, True, 0 if kind == "column" else 1, 1)
        # The whole one's gradient is partial along the sequence under sequence parallelism:
        # Megatron sums such parameters' gradients over TP (finalize_model_grads).
        whole.sequence_parallel = bool(layer.sequence_parallel)
        layer.__class__ = _lora_class(type(layer))
        layer.lora_kind, layer.lora_scale, layer.lora_enabled = kind, spec.scale, True
        layer.lora_dropout = (torch.nn.Dropout(spec.dropout) if spec.dropout > 0
                              else torch.nn.Identity())
        layer.register_parameter("lora_a", lora_a)
        layer.register_parameter("lora_b", lora_b)
        names.append(name)
    if not names:
        raise ValueError(f"no layer matches lora.target_modules {list(spec.target_modules)} "
                         f"(adaptable: {list(TARGETS)})")
    return names


def adapted_layers(module) -> Iterator[Tuple[str, torch.nn.Module]]:
    for name, layer in module.named_modules():
        if isinstance(layer, _LoraMixin):
            yield name, layer


@contextlib.contextmanager
def adapters_off(module):
    """The base model for the duration (the reference role of a LoRA actor: no second copy)."""
    layers = [layer for _, layer in adapted_layers(module)]
    for layer in layers:
        layer.lora_enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.lora_enabled = True


def merged_weights(module) -> Dict[str, torch.Tensor]:
    """{parameter name: this rank's merged shard} of every adapted layer's weight."""
    return {f"{name}.weight": layer.merged_weight() for name, layer in adapted_layers(module)}
