"""The dense decoder families, Qwen2 and Llama: RMSNorm, SwiGLU, GQA, RoPE; HF configs both
ways, the Megatron TransformerConfig settings and local layer spec. They differ only in the
qkv bias (HF Qwen2 always has one, HF Llama never has a qkv-only one) and in the config
options each refuses; each is one thin registration of `DenseFamily`.

Anything a spec cannot express (rope scaling, sliding windows, output or MLP biases) is
refused here, so a conversion never silently drops part of a model.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from mindrl.config.model_spec import ModelSpec
from mindrl.models.families import Features, register_model_family

TokenIds = Optional[Union[int, list[int]]]


def rope_theta(config, name: str) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"{name}: rope_type {rope_type!r} (RoPE scaling) is not supported; "
                         f"only 'default' RoPE maps to a ModelSpec")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise ValueError(f"{name}: config has no rope_theta")
    return float(theta)


def head_kind(config, name: str) -> str:
    """"scalar" for a *ForSequenceClassification reward model (exactly one label)."""
    classes = getattr(config, "architectures", None) or []
    if not any(c.endswith("ForSequenceClassification") for c in classes):
        return "lm"
    if config.num_labels != 1:
        raise ValueError(f"{name}: {classes[0]} with num_labels={config.num_labels}; a reward "
                         f"model has one score (num_labels=1)")
    return "scalar"


class DenseFamily:
    """A dense decoder family. Subclasses name the HF classes and their own checks."""

    model_type = ""
    hf_prefix = ""                  # HF class names: {prefix}ForCausalLM, {prefix}Config, ...
    features = Features()
    model_class = None              # the Megatron model: GPTModel (builder's default)

    # ------------------------------------------------------------------ spec <-> HF

    def check_spec(self, spec: ModelSpec) -> None:
        """What this family's HF architecture cannot express in a spec; ValueError if so."""

    def hf_extra(self, spec: ModelSpec) -> dict:
        """HF config arguments only this family has."""
        return {}

    def check_hf(self, config, name: str) -> None:
        """HF config options a spec cannot express; ValueError if set."""

    def spec_extra(self, config, name: str) -> dict:
        """ModelSpec fields only this family reads from its HF config (a `moe:` block)."""
        return {}

    def config_class(self):
        import transformers

        return getattr(transformers, f"{self.hf_prefix}Config")

    def hf_config(self, spec: ModelSpec, torch_dtype: str = "float32",
                  bos_token_id: TokenIds = None, eos_token_id: TokenIds = None,
                  pad_token_id: Optional[int] = None, initializer_range: float = 0.02,
                  vision_token_ids: Optional[Mapping[str, int]] = None):
        """The HF config of the spec's shape; a scalar-head spec gives a
        *ForSequenceClassification config with num_labels=1. transformers 5 keeps the RoPE
        base in ``rope_parameters``; the dtype goes to ``dtype``."""
        self.check_spec(spec)
        scalar = spec.head == "scalar"
        kind = "ForSequenceClassification" if scalar else "ForCausalLM"
        return self.config_class()(
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.ffn_hidden_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_attention_heads,
            num_key_value_heads=spec.num_query_groups,
            head_dim=spec.head_dim,
            hidden_act="silu",
            max_position_embeddings=spec.max_position_embeddings,
            rms_norm_eps=spec.norm_epsilon,
            rope_parameters={"rope_type": "default", "rope_theta": float(spec.rotary_base)},
            tie_word_embeddings=not spec.untie_embeddings_and_output_weights,
            initializer_range=initializer_range,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            dtype=torch_dtype,
            architectures=[self.hf_prefix + kind],
            **({"num_labels": 1} if scalar else {}),
            **self.hf_extra(spec),
        )

    def spec_from_hf(self, config: Any, name: str, make_vocab_size_divisible_by: int = 1
                     ) -> ModelSpec:
        """The ModelSpec of an HF config object of this family."""
        if config.hidden_act != "silu":
            raise ValueError(f"{name}: hidden_act {config.hidden_act!r} is not supported "
                             f"(need 'silu')")
        self.check_hf(config, name)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None)
        kv_channels = head_dim if head_dim and head_dim * heads != config.hidden_size else None
        return ModelSpec(
            name=name,
            architecture=self.model_type,
            num_layers=config.num_hidden_layers,
            hidden_size=config.hidden_size,
            ffn_hidden_size=config.intermediate_size,
            num_attention_heads=heads,
            num_query_groups=config.num_key_value_heads or heads,
            vocab_size=config.vocab_size,
            untie_embeddings_and_output_weights=not config.tie_word_embeddings,
            norm_epsilon=float(config.rms_norm_eps),
            rotary_base=rope_theta(config, name),
            max_position_embeddings=config.max_position_embeddings,
            add_qkv_bias=self.features.qkv_bias,
            kv_channels=kv_channels,
            make_vocab_size_divisible_by=make_vocab_size_divisible_by,
            head=head_kind(config, name),
            **self.spec_extra(config, name),
        )

    # ------------------------------------------------------------------ Megatron

    def transformer_config_kwargs(self, spec: ModelSpec) -> dict:
        """This family's TransformerConfig settings (the builder adds shape, parallelism,
        dtype and the device's fusions)."""
        import torch.nn.functional as F

        return dict(normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
                    add_bias_linear=False, add_qkv_bias=spec.add_qkv_bias,
                    qk_layernorm=self.features.qk_norm)

    def layer_spec(self, config):
        """Megatron's local (no Transformer Engine) layer spec of one decoder layer; the
        builder puts MindRL's attention and norms into it."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        return get_gpt_layer_local_spec(normalization="RMSNorm",
                                        qk_layernorm=self.features.qk_norm)


class Qwen2Family(DenseFamily):
    model_type, hf_prefix = "qwen2", "Qwen2"
    features = Features(qkv_bias=True)   # hard-wired in HF Qwen2 attention

    def check_spec(self, spec: ModelSpec) -> None:
        if not spec.add_qkv_bias:
            raise ValueError(f"model {spec.name}: HF Qwen2 always has a qkv bias; set "
                             f"add_qkv_bias: true or use architecture 'llama'")

    def hf_extra(self, spec: ModelSpec) -> dict:
        return dict(use_sliding_window=False, max_window_layers=spec.num_layers)

    def check_hf(self, config, name: str) -> None:
        if getattr(config, "use_sliding_window", False):
            raise ValueError(f"{name}: sliding-window attention is not supported")


class LlamaFamily(DenseFamily):
    model_type, hf_prefix = "llama", "Llama"
    features = Features(qkv_bias=False)

    def check_spec(self, spec: ModelSpec) -> None:
        if spec.add_qkv_bias:
            # HF Llama's attention_bias also adds an o_proj bias, which Megatron's lacks.
            raise ValueError(f"model {spec.name}: HF Llama has no qkv-only bias; set "
                             f"add_qkv_bias: false or use architecture 'qwen2'")

    def hf_extra(self, spec: ModelSpec) -> dict:
        return dict(attention_bias=False, mlp_bias=False, pretraining_tp=1)

    def check_hf(self, config, name: str) -> None:
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise ValueError(f"{name}: Llama attention_bias/mlp_bias are not supported")


QWEN2, LLAMA = Qwen2Family(), LlamaFamily()
register_model_family(QWEN2)
register_model_family(LLAMA)
