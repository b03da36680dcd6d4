"""The model half of each family, registered by its HF `model_type`.

A family module (`families/<family>.py`) declares one object with its features, its spec
checks, the HF config both ways, the Megatron TransformerConfig settings and layer spec, and
its model class; it registers itself with `register_model_family` when imported. Shipped
families are imported by name on first use (`SHIPPED`), so listing them loads nothing and
the builder, which a family's model may build on, never imports a family module itself.
mindrl/ckpt/registry.py joins this half with the family's tensor table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class Features:
    """What a family's models have, declared so that callers ask instead of probing a built
    model: a vision tower (`multimodal`), multimodal RoPE (`mrope`), a qkv bias fixed by the
    HF architecture (`qkv_bias`: True always, False never), per-head RMSNorms on queries and
    keys (`qk_norm`: Megatron's qk_layernorm), Mixture-of-Experts layers (`experts`: qwen3_moe)."""

    qkv_bias: bool = False
    multimodal: bool = False
    mrope: bool = False
    experts: bool = False
    qk_norm: bool = False

# model_type -> the module that registers it.
SHIPPED: Dict[str, str] = {
    "qwen2": "mindrl.models.families.dense",
    "llama": "mindrl.models.families.dense",
    "qwen2_5_vl": "mindrl.models.families.qwen25_vl",
    "qwen3": "mindrl.models.families.qwen3",
    "qwen3_moe": "mindrl.models.families.qwen3_moe",
}
_FAMILIES: Dict[str, Any] = {}


def register_model_family(family: Any) -> None:
    _FAMILIES[family.model_type] = family


def unregister_model_family(model_type: str) -> None:
    _FAMILIES.pop(model_type, None)


def model_types() -> Tuple[str, ...]:
    """Every family's model_type: shipped ones first, in `SHIPPED` order."""
    return tuple(dict.fromkeys([*SHIPPED, *_FAMILIES]))


def model_family(model_type: str) -> Any:
    """The model half registered for ``model_type``; ValueError naming the known ones."""
    if model_type not in _FAMILIES and model_type in SHIPPED:
        importlib.import_module(SHIPPED[model_type])
    if model_type not in _FAMILIES:
        raise ValueError(f"model_type {model_type!r} is not supported; "
                         f"supported: {', '.join(model_types())}")
    return _FAMILIES[model_type]
