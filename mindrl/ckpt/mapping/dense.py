"""The dense decoder's tensor table (Qwen2, Llama: RMSNorm, GQA attention, SwiGLU MLP) and
its two registrations, which differ only in flags the spec carries (qkv bias, tied
embeddings) and in the --model-type-hf names that accept them. MindSpeed's guide converts
Qwen2.5 with "llama2" + --add-qkv-bias (a Llama-layout decoder with qkv bias), so llama2
accepts qwen2 too."""

from __future__ import annotations

from typing import List

from mindrl.ckpt.mapping.decoder import layer_rule
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.rule import FUSE_GATE_UP, FUSE_QKV, TensorRule
from mindrl.config.model_spec import ModelSpec

_ATTN = "self_attn."


def dense_layer_rules(spec: ModelSpec) -> List[TensorRule]:
    """One decoder layer; Megatron's modules already hold what vLLM fuses (qkv, gate/up)."""
    rules = [
        layer_rule("input_layernorm.weight", ["input_layernorm.weight"], shapes=(("hidden",),)),
        layer_rule("self_attention.linear_qkv.weight",
                   [_ATTN + "q_proj.weight", _ATTN + "k_proj.weight", _ATTN + "v_proj.weight"],
                   fuse=FUSE_QKV, tp_dim=0,
                   shapes=(("q", "hidden"), ("kv", "hidden"), ("kv", "hidden"))),
        layer_rule("self_attention.linear_proj.weight", [_ATTN + "o_proj.weight"], tp_dim=1,
                   shapes=(("hidden", "q"),)),
        layer_rule("pre_mlp_layernorm.weight", ["post_attention_layernorm.weight"],
                   shapes=(("hidden",),)),
        layer_rule("mlp.linear_fc1.weight", ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
                   fuse=FUSE_GATE_UP, tp_dim=0, shapes=(("ffn", "hidden"), ("ffn", "hidden"))),
        layer_rule("mlp.linear_fc2.weight", ["mlp.down_proj.weight"], tp_dim=1,
                   shapes=(("hidden", "ffn"),)),
    ]
    if spec.add_qkv_bias:
        rules.insert(2, layer_rule(
            "self_attention.linear_qkv.bias",
            [_ATTN + "q_proj.bias", _ATTN + "k_proj.bias", _ATTN + "v_proj.bias"],
            fuse=FUSE_QKV, tp_dim=0, shapes=(("q",), ("kv",), ("kv",))))
    return rules


QWEN2 = FamilyMapping("qwen2", dense_layer_rules, model_type_hf=("qwen2", "llama2"))
LLAMA = FamilyMapping("llama", dense_layer_rules, model_type_hf=("llama2", "llama3", "llama"))
