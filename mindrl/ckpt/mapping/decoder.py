"""The decoder family's table (Qwen2, Llama): embedding, per-layer attention and MLP, final
norm, and the head (lm_head, tied, or a reward model's score)."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from mindrl.ckpt.mapping.rule import FUSE_GATE_UP, FUSE_QKV, TensorRule, family_rules
from mindrl.config.model_spec import ModelSpec


def _layer_rule(mcore: str, hf: Sequence[str], **kw) -> TensorRule:
    return TensorRule("decoder.layers.{layer}." + mcore,
                      tuple("model.layers.{layer}." + n for n in hf), per_layer=True, **kw)


EMBEDDING = TensorRule("embedding.word_embeddings.weight", ("model.embed_tokens.weight",),
                       tp_dim=0, vocab=True)
FINAL_NORM = TensorRule("decoder.final_layernorm.weight", ("model.norm.weight",))
OUTPUT = TensorRule("output_layer.weight", ("lm_head.weight",), tp_dim=0, vocab=True)
# A reward model (spec.head "scalar", HF *ForSequenceClassification with num_labels=1): the
# [1, hidden] score replaces the LM head under the same Megatron name, replicated over TP.
SCORE = TensorRule("output_layer.weight", ("score.weight",))


def _decoder_layer_rules(spec: ModelSpec) -> List[TensorRule]:
    attn = "self_attn."
    rules = [
        _layer_rule("input_layernorm.weight", ["input_layernorm.weight"]),
        _layer_rule("self_attention.linear_qkv.weight",
                    [attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"],
                    fuse=FUSE_QKV, tp_dim=0),
        _layer_rule("self_attention.linear_proj.weight", [attn + "o_proj.weight"], tp_dim=1),
        _layer_rule("pre_mlp_layernorm.weight", ["post_attention_layernorm.weight"]),
        _layer_rule("mlp.linear_fc1.weight", ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
                    fuse=FUSE_GATE_UP, tp_dim=0),
        _layer_rule("mlp.linear_fc2.weight", ["mlp.down_proj.weight"], tp_dim=1),
    ]
    if spec.add_qkv_bias:
        rules.insert(2, _layer_rule(
            "self_attention.linear_qkv.bias",
            [attn + "q_proj.bias", attn + "k_proj.bias", attn + "v_proj.bias"],
            fuse=FUSE_QKV, tp_dim=0))
    return rules


# One table per HF architecture family; Qwen2 and Llama share names and layouts and differ
# only in flags the spec carries (qkv bias, tied embeddings).
ARCHITECTURE_TABLES: Dict[str, Callable[[ModelSpec], List[TensorRule]]] = {
    "qwen2": _decoder_layer_rules,
    "llama": _decoder_layer_rules,
}


def layer_rules(spec: ModelSpec) -> List[TensorRule]:
    return family_rules(ARCHITECTURE_TABLES, spec.architecture, spec,
                        "tensor table for architecture")


def head_rule(spec: ModelSpec) -> Optional[TensorRule]:
    """The output layer's rule: score (reward model), lm_head (untied) or None (tied: the
    embedding serves as the output layer)."""
    if spec.head == "scalar":
        return SCORE
    return None if spec.tied_embeddings else OUTPUT


def global_rules(spec: ModelSpec) -> List[TensorRule]:
    """Non-layer tensors as stored in HF: lm_head only when embeddings are untied; score for
    a reward model."""
    head = head_rule(spec)
    return [EMBEDDING, FINAL_NORM] + ([head] if head else [])


def decoder_hf_shapes(rule: TensorRule, spec: ModelSpec) -> Tuple[Tuple[int, ...], ...]:
    """Shapes the HF parts of a decoder rule must have."""
    h, d = spec.hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_query_groups * d
    if rule is SCORE:
        return ((1, h),)
    name = rule.mcore.rsplit(".", 2)[-2] + "." + rule.mcore.rsplit(".", 1)[-1]
    shapes = {
        "word_embeddings.weight": ((spec.vocab_size, h),),
        "output_layer.weight": ((spec.vocab_size, h),),
        "linear_qkv.weight": ((q, h), (kv, h), (kv, h)),
        "linear_qkv.bias": ((q,), (kv,), (kv,)),
        "linear_proj.weight": ((h, q),),
        "linear_fc1.weight": ((spec.ffn_hidden_size, h), (spec.ffn_hidden_size, h)),
        "linear_fc2.weight": ((h, spec.ffn_hidden_size),),
    }
    return shapes.get(name, ((h,),))


# HF tensors that are derived buffers, not weights (older Llama checkpoints store RoPE's
# inv_freq); a converter may skip them without losing anything.
DERIVED_HF_SUFFIXES = ("rotary_emb.inv_freq",)


def is_derived_hf_tensor(name: str) -> bool:
    return name.endswith(DERIVED_HF_SUFFIXES)
