"""The weight sync's plan, pure functions of the model spec: every Megatron tensor in
streaming order with its pipeline stage (`plan_units`), buckets that never split a module
(`plan_buckets`), and where each HF part sits inside a bucket (`bucket_layout`); and what a
sync reports (`SyncStats`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch

from mindrl.ckpt import mapping
from mindrl.config.model_spec import ModelSpec


WIRE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)   # a header's dtype codes


@dataclass
class SyncStats:
    transport: str = ""         # which transport moved the bytes (weight_sync/transport.py)
    seconds: float = 0.0
    bytes: int = 0              # HF bytes handed to vLLM (host only)
    tensors: int = 0
    buckets: int = 0
    buffer_bytes: int = 0       # the bucket buffers' size (0: none)
    gather_seconds: float = 0.0  # TP gathers and receives, or ranks writing shared memory
    pack_seconds: float = 0.0    # un-fusing and copying into the bucket
    load_seconds: float = 0.0    # waiting for vLLM's loads
    verify_seconds: float = 0.0  # the whole check (expected_seconds included)
    expected_seconds: float = 0.0  # the actor's side of it: probe products, gathered
    relayed_bytes: int = 0      # bucket bytes sent to other nodes' receivers (node_relay.py)
    expert_gather_numel: int = 0   # expert elements this rank received over EP (EP > 1)


@dataclass(frozen=True)
class Unit:
    """One Megatron tensor of the full model and where it lives."""

    rule: mapping.TensorRule
    layer: Optional[int]      # global layer number (None: embedding, final norm, output)
    stage: int                # pipeline rank that holds it
    local_name: str           # its parameter name inside that stage's GPTModel
    module: str               # Megatron module path: tensors that must reach vLLM together
    numel: int                # elements of its HF parts (vocab padding removed)


def plan_units(spec: ModelSpec, pp_size: int, first_stage_layers: Optional[int] = None,
               last_stage_layers: Optional[int] = None) -> List[Unit]:
    """Every tensor of the model in streaming order, with its pipeline stage (the stages'
    layer counts as the model was built: config/pipeline_stages.py)."""
    ranges = [mapping.stage_layers(spec.num_layers, s, pp_size, first_stage_layers,
                                   last_stage_layers) for s in range(pp_size)]
    units = []
    for rule, layer in mapping.iter_rules(spec):
        if layer is None:
            # The embedding and a VL model's vision tower live on the first stage.
            first = rule is mapping.EMBEDDING or mapping.is_vision_tensor(rule.mcore)
            stage = 0 if first else pp_size - 1
            local = rule.mcore_name()
        else:
            stage = next(s for s, layers in enumerate(ranges) if layer in layers)
            local = rule.mcore_name(layer - ranges[stage].start)
        numel = sum(math.prod(shape) for shape in mapping.expected_hf_shapes(rule, spec))
        units.append(Unit(rule, layer, stage, local, fused_module(rule, layer), numel))
    return units


def fused_module(rule: mapping.TensorRule, layer: Optional[int]) -> str:
    """The group of tensors that must reach vLLM in one load, as the family's table declares
    it (`TensorRule.group`): a Megatron module already holds what vLLM fuses in the language
    model (qkv, gate/up); a vision tower's HF tensors, which vLLM fuses among siblings, are
    grouped by their module's parent (mindrl/ckpt/mapping/vision.py)."""
    return rule.group_name(layer)


def plan_buckets(units: List[Unit], bucket_numel: int) -> List[List[Unit]]:
    """Greedy buckets of at most bucket_numel elements that never split a module; a module
    larger than a bucket gets a bucket of its own."""
    groups: List[List[Unit]] = []
    for unit in units:
        if groups and groups[-1][0].module == unit.module:
            groups[-1].append(unit)
        else:
            groups.append([unit])
    buckets: List[List[Unit]] = []
    size = 0
    for group in groups:
        group_numel = sum(u.numel for u in group)
        if buckets and size + group_numel <= bucket_numel:
            buckets[-1].extend(group)
            size += group_numel
        else:
            buckets.append(list(group))
            size = group_numel
    return buckets


def bucket_layout(bucket: List[Unit], spec: ModelSpec):
    """[(unit, [(hf name, offset, shape) per part])] of a bucket in the region, in order."""
    out, offset = [], 0
    for unit in bucket:
        parts = []
        for name, shape in zip(unit.rule.hf_names(unit.layer),
                               mapping.expected_hf_shapes(unit.rule, spec)):
            parts.append((name, offset, tuple(shape)))
            offset += math.prod(shape)
        out.append((unit, parts))
    return out


def part_views(region: torch.Tensor, parts):
    return [region[o:o + math.prod(shape)].view(shape) for _, o, shape in parts]
