"""THE registry of model families, by HF `model_type`: each joins its model half
(mindrl/models/families/<family>.py: spec checks, HF config, Megatron config, model class,
features) and its checkpoint half (mindrl/ckpt/mapping/<family>.py: tensor table, fused
groups, --model-type-hf names). It lives in ckpt because ckpt sits above models.

The converter, checkpoint loading, the resharding engine, fingerprints and the weight sync's
plan read tensor tables only through here; config (below torch) keeps a name list
(config/names.py) that tests/ckpt/test_registry.py holds equal to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

from mindrl.ckpt.mapping import dense, qwen3, qwen3_moe, qwen25_vl
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.models.families import (model_family, register_model_family,
                                    unregister_model_family)

_MAPPINGS: Dict[str, FamilyMapping] = {
    m.model_type: m for m in (dense.QWEN2, dense.LLAMA, qwen25_vl.MAPPING, qwen3.MAPPING,
                              qwen3_moe.MAPPING)}


@dataclass(frozen=True)
class Family:
    """Both halves of one family. The model half loads on first use (a VL family's imports
    transformers' vision tower and Megatron)."""

    mapping: FamilyMapping

    @property
    def model_type(self) -> str:
        return self.mapping.model_type

    @property
    def model(self) -> Any:
        return model_family(self.model_type)

    @property
    def multimodal(self) -> bool:
        return self.model.features.multimodal


def model_types() -> Tuple[str, ...]:
    return tuple(_MAPPINGS)


def mapping_of(model_type: str) -> FamilyMapping:
    """The tensor table half of ``model_type``'s family; ValueError naming the known ones."""
    if model_type not in _MAPPINGS:
        raise ValueError(f"no tensor table for model_type {model_type!r}; "
                         f"registered: {', '.join(_MAPPINGS)}")
    return _MAPPINGS[model_type]


def family(model_type: str) -> Family:
    return Family(mapping_of(model_type))


def register(model: Any, mapping: FamilyMapping) -> None:
    """Add (or replace) a family from its two halves, which must name one model_type."""
    if model.model_type != mapping.model_type:
        raise ValueError(f"a family's halves name one model_type: model "
                         f"{model.model_type!r}, mapping {mapping.model_type!r}")
    register_model_family(model)
    _MAPPINGS[mapping.model_type] = mapping


def replace_mapping(mapping: FamilyMapping) -> FamilyMapping:
    """Swap a registered family's tensor table; returns the one it replaced (tests simulate
    a bad table edit with it)."""
    previous = mapping_of(mapping.model_type)
    _MAPPINGS[mapping.model_type] = mapping
    return previous


def unregister(model_type: str) -> None:
    _MAPPINGS.pop(model_type, None)
    unregister_model_family(model_type)


def model_type_hf() -> Dict[str, Tuple[str, ...]]:
    """--model-type-hf name -> the config.json model_types it may convert, in registry order."""
    table: Dict[str, Tuple[str, ...]] = {}
    for mapping in _MAPPINGS.values():
        for name in mapping.model_type_hf:
            table[name] = table.get(name, ()) + (mapping.model_type,)
    return table
