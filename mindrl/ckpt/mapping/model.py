"""The whole model's tensors in checkpoint order (decoder, then a vision tower), read from
the registered family tables, and its parallel views.

A "full" Megatron state dict uses global layer numbers and unsplit tensors; pipeline stages
and TP ranks are views of it (`stage_layers`, `layout.shard`).
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from mindrl.ckpt import registry
from mindrl.ckpt.mapping.decoder import EMBEDDING, FINAL_NORM, OUTPUT, head_rule
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.layout import hf_to_mcore, shard
from mindrl.ckpt.mapping.rule import TensorRule, expand_experts, hf_shapes
from mindrl.ckpt.mapping.stacked import split, unstack_state_dict
from mindrl.config.model_spec import ModelSpec, VisionSpec
from mindrl.config.pipeline_stages import stage_layer_range


def layer_rules(spec: ModelSpec, layer: Optional[int] = None) -> List[TensorRule]:
    """Decoder layer ``layer``'s rules, from the registered family of ``spec.architecture``,
    with any ``{expert}`` rule expanded over the layer's experts; layer None: every rule any
    layer may hold (a MoE model's dense and expert layers differ: FamilyMapping.in_layer)."""
    table = registry.mapping_of(spec.architecture)
    rules = _expanded(table, spec)
    if layer is None:
        return list(rules)
    return [rule for rule in rules if table.in_layer(spec, rule, layer)]


@functools.lru_cache(maxsize=16)
def _expanded(table: FamilyMapping, spec: ModelSpec) -> Tuple[TensorRule, ...]:
    """Cached: a MoE table expands to thousands of rules, asked for once per layer."""
    return tuple(expand_experts(table.layer_rules(spec), table.num_experts(spec)))


def hf_split(spec: ModelSpec) -> Optional[Callable[[str, Tuple[int, ...]], Optional[list]]]:
    """How an HF reader reads a stacked expert tensor of ``spec``'s family as the per-expert
    tensors of the tables (hf_io.HFWeights.open's split); None for a family without one."""
    stacked = registry.mapping_of(spec.architecture).stacked_hf
    return functools.partial(split, stacked) if stacked else None


def unstack_hf(hf: Dict[str, torch.Tensor], spec: ModelSpec) -> Dict[str, torch.Tensor]:
    """An HF state dict with experts stacked as a loaded transformers model holds them, read
    under the per-expert names of the tables (views; other tensors as they are)."""
    return unstack_state_dict(hf, registry.mapping_of(spec.architecture).stacked_hf)


def vision_rules(vision: VisionSpec) -> List[TensorRule]:
    """The vision tower's rules, from the registered family of ``vision.family``."""
    table = registry.mapping_of(vision.family)
    if table.vision_rules is None:
        raise ValueError(f"family {vision.family!r} has no vision tower table")
    return table.vision_rules(vision)


def iter_rules(spec: ModelSpec, vision: Optional[VisionSpec] = None
               ) -> Iterator[Tuple[TensorRule, Optional[int]]]:
    """Every (rule, layer) of the full model, in layer order (stream-friendly); a VL model's
    vision tower (``vision``, default the spec's) last, one tensor per rule, layer None."""
    yield EMBEDDING, None
    for layer in range(spec.num_layers):
        for rule in layer_rules(spec, layer):
            yield rule, layer
    yield FINAL_NORM, None
    head = head_rule(spec)
    if head is not None:
        yield head, None
    vision = vision or spec.vision
    if vision is not None:
        for rule in vision_rules(vision):
            yield rule, None


def hf_tensor_names(spec: ModelSpec) -> List[str]:
    return [name for rule, layer in iter_rules(spec) for name in rule.hf_names(layer)]


def expected_hf_shapes(rule: TensorRule, spec: ModelSpec) -> Tuple[Tuple[int, ...], ...]:
    """Shapes the HF parts must have (each rule declares them); the converter checks them
    before any work."""
    return hf_shapes(rule, spec)


# ---------------------------------------------------------------- pipeline stages

def stage_layers(num_layers: int, pp_rank: int, pp_size: int, first: Optional[int] = None,
                 last: Optional[int] = None) -> range:
    """Global layer numbers held by a pipeline stage: Megatron's even split, or the first /
    last stage's own count with the rest even (config/pipeline_stages.py)."""
    try:
        return stage_layer_range(num_layers, pp_rank, pp_size, first, last)
    except ValueError as e:
        raise ValueError(f"num_layers={num_layers} does not split into PP={pp_size}: {e}") \
            from None


_LAYER_RE = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")


def rules_by_mcore_suffix(spec: ModelSpec, vision: Optional[VisionSpec] = None
                          ) -> Dict[str, TensorRule]:
    table = {r.mcore.split("{layer}.", 1)[1]: r for r in layer_rules(spec)}
    table.update({r.mcore: r for r in (EMBEDDING, FINAL_NORM, head_rule(spec) or OUTPUT)})
    vision = vision or spec.vision
    if vision is not None:
        table.update({r.mcore: r for r in vision_rules(vision)})
    return table


def rule_for(mcore_name: str, spec: ModelSpec, vision: Optional[VisionSpec] = None
             ) -> Tuple[TensorRule, Optional[int]]:
    """(rule, global-or-local layer) for a Megatron parameter name."""
    table = rules_by_mcore_suffix(spec, vision)
    m = _LAYER_RE.match(mcore_name)
    key, layer = (m.group(2), int(m.group(1))) if m else (mcore_name, None)
    if key not in table:
        raise KeyError(f"Megatron tensor {mcore_name!r} has no entry in mindrl/ckpt/mapping/")
    return table[key], layer


def stage_state_dict(full: Dict[str, torch.Tensor], spec: ModelSpec, tp_rank: int,
                     tp_size: int, pp_rank: int, pp_size: int,
                     vision: Optional[VisionSpec] = None, first_stage_layers: Optional[int] = None,
                     last_stage_layers: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """The local state dict of one (TP, PP) rank from a full Megatron state dict.

    Layers are renumbered from 0 within the stage, as Megatron's modules name them. With tied
    embeddings and PP > 1 the last stage holds its own copy of the embedding as output_layer.
    A VL model's vision tower is whole on every TP rank of the first stage.
    """
    layers = stage_layers(spec.num_layers, pp_rank, pp_size, first_stage_layers,
                          last_stage_layers)
    first, last = pp_rank == 0, pp_rank == pp_size - 1
    out: Dict[str, torch.Tensor] = {}
    if first:
        out[EMBEDDING.mcore] = shard(EMBEDDING, full[EMBEDDING.mcore], tp_rank, tp_size)
        for rule in vision_rules(vision or spec.vision) if (vision or spec.vision) else ():
            out[rule.mcore] = full[rule.mcore]
    for local, layer in enumerate(layers):
        for rule in layer_rules(spec, layer):
            out[rule.mcore_name(local)] = shard(rule, full[rule.mcore_name(layer)], tp_rank, tp_size)
    if last:
        out[FINAL_NORM.mcore] = full[FINAL_NORM.mcore]
        head = head_rule(spec)
        if head is not None:
            out[head.mcore] = shard(head, full[head.mcore], tp_rank, tp_size)
        elif pp_size > 1:
            out[OUTPUT.mcore] = shard(OUTPUT, full[EMBEDDING.mcore], tp_rank, tp_size)
    return out


def full_mcore_from_hf(hf: Dict[str, torch.Tensor], spec: ModelSpec, tp_size: int = 1,
                       vision: Optional[VisionSpec] = None) -> Dict[str, torch.Tensor]:
    """Whole HF state dict (on-disk names; experts per expert or stacked) -> full Megatron
    state dict (small models, tests, resharding)."""
    padded = spec.padded_vocab_size(tp_size)
    hf = unstack_hf(hf, spec)
    return {rule.mcore_name(layer): hf_to_mcore(rule, [hf[n] for n in rule.hf_names(layer)],
                                                spec, padded)
            for rule, layer in iter_rules(spec, vision)}
