"""Qwen3 dense: the dense decoder (families/dense.py) with a per-head RMSNorm on queries and
keys (Megatron's qk_layernorm), no qkv bias and a head dim set on its own (HF `head_dim`,
Megatron `kv_channels`; 0.6B has 16 heads of 128 on a hidden size of 1024).

Megatron's GPTModel on the local spec with `qk_layernorm=True` equals transformers'
`Qwen3ForCausalLM` bit for bit (docs/platforms.md#qwen3-and-qwen3-moe-probes). The builder
puts the sequence-parallel-capable norm into the q/k norm slots; Megatron's
`finalize_model_grads` sums their gradients over TP (each rank holds some heads). Sliding
windows, RoPE scaling and attention biases (HF's also bias o_proj) have no spec field and are
refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mindrl.config.model_spec import ModelSpec
from mindrl.models.families import Features, register_model_family
from mindrl.models.families.dense import DenseFamily


class Qwen3Family(DenseFamily):
    model_type, hf_prefix = "qwen3", "Qwen3"
    features = Features(qkv_bias=False, qk_norm=True)

    def check_spec(self, spec: ModelSpec) -> None:
        if spec.add_qkv_bias:
            raise ValueError(f"model {spec.name}: HF Qwen3 has no qkv-only bias (its "
                             f"attention_bias also biases o_proj); set add_qkv_bias: false")

    def hf_extra(self, spec: ModelSpec) -> dict:
        return dict(attention_bias=False, use_sliding_window=False, sliding_window=None,
                    max_window_layers=spec.num_layers)

    def check_hf(self, config, name: str) -> None:
        if getattr(config, "attention_bias", False):
            raise ValueError(f"{name}: Qwen3 attention_bias (q/k/v/o biases) is not supported")
        sliding = [t for t in getattr(config, "layer_types", None) or () if t != "full_attention"]
        if getattr(config, "use_sliding_window", False) or sliding:
            raise ValueError(f"{name}: sliding-window attention is not supported "
                             f"(use_sliding_window / layer_types)")

    def spec_from_hf(self, config: Any, name: str, make_vocab_size_divisible_by: int = 1
                     ) -> ModelSpec:
        """As the dense family's, with the head dim always explicit: Qwen3's is its own
        number, equal to hidden / heads only by chance (8B, 14B)."""
        spec = super().spec_from_hf(config, name, make_vocab_size_divisible_by)
        head_dim = getattr(config, "head_dim", None) or spec.head_dim
        return dataclasses.replace(spec, kv_channels=head_dim)


QWEN3 = Qwen3Family()
register_model_family(QWEN3)
