"""The vision family's table (Qwen2.5-VL's tower) and a VL model's HF names.

Qwen2.5-VL's vision tower is transformers' own module (mindrl/models/families/qwen25_vl.py):
in the Megatron model it keeps its HF checkpoint names, whole on every TP rank of the first
pipeline stage, so its tensors are copied as they are (never fused, padded or split).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Tuple

from mindrl.ckpt.mapping.rule import TensorRule, family_rules
from mindrl.config.model_spec import VisionSpec

VISION_PREFIX = "visual."
# A loaded transformers VL model nests its parts under `model`; checkpoints on disk (and the
# tables) use the flat names.
_HF_RUNTIME_PREFIXES = (("model.language_model.", "model."), ("model.visual.", VISION_PREFIX))


def hf_disk_name(name: str) -> str:
    """The on-disk HF name of a tensor named as in a loaded transformers model's state_dict
    (`model.language_model.layers.0...` -> `model.layers.0...`); other names are unchanged."""
    for runtime, disk in _HF_RUNTIME_PREFIXES:
        if name.startswith(runtime):
            return disk + name[len(runtime):]
    return name


def is_vision_tensor(name: str) -> bool:
    """An HF (on-disk) or Megatron name of the vision tower: the same name on both sides."""
    return name.startswith(VISION_PREFIX)


def _vision_rule(name: str, *shapes: Tuple[int, ...]) -> TensorRule:
    """One vision tensor: the same name in HF (on disk) and Megatron, replicated, copied."""
    return TensorRule(VISION_PREFIX + name, (VISION_PREFIX + name,), shapes=tuple(shapes))


def _qwen25_vision_rules(v: VisionSpec) -> List[TensorRule]:
    """transformers' Qwen2_5_VisionTransformerPretrainedModel: Conv3d patch embedding (no
    bias), RMSNorm blocks with fused qkv and a biased SwiGLU MLP, a 2x2 patch merger."""
    h, f = v.hidden_size, v.intermediate_size
    merged = h * v.spatial_merge_size ** 2
    rules = [_vision_rule("patch_embed.proj.weight", (h, v.in_channels, v.temporal_patch_size,
                                                      v.patch_size, v.patch_size))]
    for n in range(v.depth):
        block = f"blocks.{n}."
        rules += [
            _vision_rule(block + "norm1.weight", (h,)),
            _vision_rule(block + "norm2.weight", (h,)),
            _vision_rule(block + "attn.qkv.weight", (3 * h, h)),
            _vision_rule(block + "attn.qkv.bias", (3 * h,)),
            _vision_rule(block + "attn.proj.weight", (h, h)),
            _vision_rule(block + "attn.proj.bias", (h,)),
        ]
        for proj, shape in (("gate_proj", (f, h)), ("up_proj", (f, h)), ("down_proj", (h, f))):
            rules += [_vision_rule(f"{block}mlp.{proj}.weight", shape),
                      _vision_rule(f"{block}mlp.{proj}.bias", shape[:1])]
    rules += [
        _vision_rule("merger.ln_q.weight", (h,)),
        _vision_rule("merger.mlp.0.weight", (merged, merged)),
        _vision_rule("merger.mlp.0.bias", (merged,)),
        _vision_rule("merger.mlp.2.weight", (v.out_hidden_size, merged)),
        _vision_rule("merger.mlp.2.bias", (v.out_hidden_size,)),
    ]
    return rules


# One table per vision family, beside decoder.ARCHITECTURE_TABLES.
VISION_TABLES: Dict[str, Callable[[VisionSpec], List[TensorRule]]] = {
    "qwen2_5_vl": _qwen25_vision_rules,
}


def vision_rules(vision: VisionSpec) -> List[TensorRule]:
    return family_rules(VISION_TABLES, vision.family, vision, "vision tensor table for")
