"""Qwen3 dense's tensor table: the dense decoder's (mapping/dense.py, without qkv bias) plus
the per-head q/k norms, `self_attn.{q,k}_norm.weight` <-> `self_attention.{q,k}_layernorm.weight`,
shape [head_dim] and replicated over TP (each rank normalises its own heads with the same
weight)."""

from __future__ import annotations

from typing import List

from mindrl.ckpt.mapping.decoder import layer_rule
from mindrl.ckpt.mapping.dense import dense_layer_rules
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.rule import TensorRule
from mindrl.config.model_spec import ModelSpec


def qwen3_layer_rules(spec: ModelSpec) -> List[TensorRule]:
    rules = dense_layer_rules(spec)
    qkv = next(i for i, r in enumerate(rules) if r.mcore.endswith("linear_qkv.weight"))
    rules[qkv + 1:qkv + 1] = [
        layer_rule(f"self_attention.{m}_layernorm.weight", [f"self_attn.{m}_norm.weight"],
                   shapes=(("head_dim",),))
        for m in ("q", "k")]
    return rules


MAPPING = FamilyMapping("qwen3", qwen3_layer_rules, model_type_hf=("qwen3",))
