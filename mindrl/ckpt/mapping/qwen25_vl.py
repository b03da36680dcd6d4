"""Qwen2.5-VL's checkpoint half: the Qwen2 dense decoder's layer table plus the vision
tower's (transformers' Qwen2_5_VisionTransformerPretrainedModel, copied under its HF names)."""

from __future__ import annotations

from typing import List

from mindrl.ckpt.mapping.dense import dense_layer_rules
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.rule import TensorRule
from mindrl.ckpt.mapping.vision import vision_rule
from mindrl.config.model_spec import VisionSpec


def qwen25_vision_rules(v: VisionSpec) -> List[TensorRule]:
    """Conv3d patch embedding (no bias), RMSNorm blocks with fused qkv and a biased SwiGLU
    MLP, a 2x2 patch merger."""
    h, f = v.hidden_size, v.intermediate_size
    merged = h * v.spatial_merge_size ** 2
    rules = [vision_rule("patch_embed.proj.weight", (h, v.in_channels, v.temporal_patch_size,
                                                     v.patch_size, v.patch_size))]
    for n in range(v.depth):
        block = f"blocks.{n}."
        rules += [
            vision_rule(block + "norm1.weight", (h,)),
            vision_rule(block + "norm2.weight", (h,)),
            vision_rule(block + "attn.qkv.weight", (3 * h, h)),
            vision_rule(block + "attn.qkv.bias", (3 * h,)),
            vision_rule(block + "attn.proj.weight", (h, h)),
            vision_rule(block + "attn.proj.bias", (h,)),
        ]
        for proj, shape in (("gate_proj", (f, h)), ("up_proj", (f, h)), ("down_proj", (h, f))):
            rules += [vision_rule(f"{block}mlp.{proj}.weight", shape),
                      vision_rule(f"{block}mlp.{proj}.bias", shape[:1])]
    rules += [
        vision_rule("merger.ln_q.weight", (h,)),
        vision_rule("merger.mlp.0.weight", (merged, merged)),
        vision_rule("merger.mlp.0.bias", (merged,)),
        vision_rule("merger.mlp.2.weight", (v.out_hidden_size, merged)),
        vision_rule("merger.mlp.2.bias", (v.out_hidden_size,)),
    ]
    return rules


MAPPING = FamilyMapping("qwen2_5_vl", dense_layer_rules, model_type_hf=("qwen2_5_vl",),
                        vision_rules=qwen25_vision_rules)
