"""ModelSpec <-> transformers config, the bridge between our yaml shapes and HF checkpoints.

The tiny-model factory writes HF configs from specs; the checkpoint converter reads specs
back from HF configs. Anything a spec cannot express (rope scaling, sliding windows, output
or MLP biases) is refused here, so a conversion never silently drops part of a model.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Union

from transformers import LlamaConfig, PretrainedConfig, Qwen2Config

from mindrl.config.model_spec import ModelSpec

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
_ARCHITECTURE_CLASSES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
# Reward models (spec.head "scalar"): HF's sequence-classification heads with one label.
_SCORE_CLASSES = {"qwen2": "Qwen2ForSequenceClassification",
                  "llama": "LlamaForSequenceClassification"}

TokenIds = Optional[Union[int, list[int]]]


def hf_config_from_spec(spec: ModelSpec, torch_dtype: str = "float32",
                        bos_token_id: TokenIds = None, eos_token_id: TokenIds = None,
                        pad_token_id: Optional[int] = None,
                        initializer_range: float = 0.02,
                        vision_token_ids: Optional[Mapping[str, int]] = None) -> PretrainedConfig:
    """A Qwen2Config or LlamaConfig with the spec's shape; a Qwen2_5_VLConfig for a VL spec,
    whose `vision_token_ids` (image_token_id, video_token_id, vision_start_token_id,
    vision_end_token_id) come from its tokenizer.

    transformers 5 keeps the RoPE base in ``rope_parameters``; the dtype goes to ``dtype``.
    A scalar-head spec gives a *ForSequenceClassification config with num_labels=1.
    """
    if spec.vision is not None:
        return _vl_config(spec, torch_dtype, bos_token_id, eos_token_id, pad_token_id,
                          initializer_range, vision_token_ids)
    scalar = spec.head == "scalar"
    classes = _SCORE_CLASSES if scalar else _ARCHITECTURE_CLASSES
    common = dict(
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
        architectures=[classes[spec.architecture]],
        **({"num_labels": 1} if scalar else {}),
    )
    if spec.architecture == "qwen2":
        if not spec.add_qkv_bias:
            raise ValueError(f"model {spec.name}: HF Qwen2 always has a qkv bias; set "
                             f"add_qkv_bias: true or use architecture 'llama'")
        return Qwen2Config(use_sliding_window=False, max_window_layers=spec.num_layers, **common)
    if spec.add_qkv_bias:
        # HF Llama's attention_bias also adds an o_proj bias, which Megatron's qkv bias lacks.
        raise ValueError(f"model {spec.name}: HF Llama has no qkv-only bias; set "
                         f"add_qkv_bias: false or use architecture 'qwen2'")
    return LlamaConfig(attention_bias=False, mlp_bias=False, pretraining_tp=1, **common)


VISION_TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id",
                     "vision_end_token_id")


def _vl_config(spec: ModelSpec, torch_dtype: str, bos_token_id: TokenIds, eos_token_id: TokenIds,
               pad_token_id: Optional[int], initializer_range: float,
               vision_token_ids: Optional[Mapping[str, int]]) -> PretrainedConfig:
    """Qwen2_5_VLConfig: the decoder as text_config (mrope), the tower as vision_config."""
    from transformers import Qwen2_5_VLConfig

    missing = [k for k in VISION_TOKEN_KEYS if k not in (vision_token_ids or {})]
    if missing:
        raise ValueError(f"model {spec.name}: a VL config needs the tokenizer's {missing}")
    text = hf_config_from_spec(dataclasses.replace(spec, vision=None, mrope_section=None),
                               torch_dtype, bos_token_id, eos_token_id, pad_token_id,
                               initializer_range).to_dict()
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
            "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range")
    text_config = {k: text[k] for k in keep}
    text_config.update(rope_theta=float(spec.rotary_base),
                       rope_scaling={"type": "mrope", "mrope_section": list(spec.mrope_section)})
    v = spec.vision
    vision_config = dict(depth=v.depth, hidden_size=v.hidden_size,
                         intermediate_size=v.intermediate_size, num_heads=v.num_heads,
                         out_hidden_size=v.out_hidden_size, patch_size=v.patch_size,
                         temporal_patch_size=v.temporal_patch_size,
                         spatial_merge_size=v.spatial_merge_size, window_size=v.window_size,
                         fullatt_block_indexes=list(v.fullatt_block_indexes),
                         in_channels=v.in_channels, hidden_act="silu")
    return Qwen2_5_VLConfig(text_config=text_config, vision_config=vision_config,
                            tie_word_embeddings=not spec.untie_embeddings_and_output_weights,
                            architectures=["Qwen2_5_VLForConditionalGeneration"],
                            dtype=torch_dtype, **{k: vision_token_ids[k] for k in VISION_TOKEN_KEYS})


def _as_config(config: Union[PretrainedConfig, Mapping[str, Any]]) -> PretrainedConfig:
    if isinstance(config, PretrainedConfig):
        return config
    values = dict(config)
    model_type = values.pop("model_type", None)
    if model_type == "qwen2":
        return Qwen2Config(**values)
    if model_type == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        return Qwen2_5_VLConfig(**values)
    if model_type == "llama":
        return LlamaConfig(**values)
    raise ValueError(f"model_type {model_type!r} is not supported; "
                     f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")


def _rope_theta(config: PretrainedConfig, name: str) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"{name}: rope_type {rope_type!r} (RoPE scaling) is not supported; "
                         f"only 'default' RoPE maps to a ModelSpec")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise ValueError(f"{name}: config has no rope_theta")
    return float(theta)


def _head(config: PretrainedConfig, name: str) -> str:
    """"scalar" for a *ForSequenceClassification reward model (exactly one label)."""
    classes = getattr(config, "architectures", None) or []
    if not any(c.endswith("ForSequenceClassification") for c in classes):
        return "lm"
    if config.num_labels != 1:
        raise ValueError(f"{name}: {classes[0]} with num_labels={config.num_labels}; a reward "
                         f"model has one score (num_labels=1)")
    return "scalar"


def spec_from_hf_config(config: Union[PretrainedConfig, Mapping[str, Any]], name: str,
                        make_vocab_size_divisible_by: int = 1) -> ModelSpec:
    """The ModelSpec of an HF Qwen2/Llama config (object or config.json dict); a
    *ForSequenceClassification config (num_labels=1) gives a scalar-head spec."""
    config = _as_config(config)
    model_type = getattr(config, "model_type", None)
    if model_type == "qwen2_5_vl":
        return _vl_spec(config, name, make_vocab_size_divisible_by)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{name}: model_type {model_type!r} is not supported; "
                         f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if config.hidden_act != "silu":
        raise ValueError(f"{name}: hidden_act {config.hidden_act!r} is not supported (need 'silu')")
    if model_type == "qwen2":
        if getattr(config, "use_sliding_window", False):
            raise ValueError(f"{name}: sliding-window attention is not supported")
        add_qkv_bias = True  # hard-wired in HF Qwen2 attention
    else:
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise ValueError(f"{name}: Llama attention_bias/mlp_bias are not supported")
        add_qkv_bias = False
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None)
    kv_channels = head_dim if head_dim and head_dim * heads != config.hidden_size else None
    return ModelSpec(
        name=name,
        architecture=model_type,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=heads,
        num_query_groups=config.num_key_value_heads or heads,
        vocab_size=config.vocab_size,
        untie_embeddings_and_output_weights=not config.tie_word_embeddings,
        norm_epsilon=float(config.rms_norm_eps),
        rotary_base=_rope_theta(config, name),
        max_position_embeddings=config.max_position_embeddings,
        add_qkv_bias=add_qkv_bias,
        kv_channels=kv_channels,
        make_vocab_size_divisible_by=make_vocab_size_divisible_by,
        head=_head(config, name),
    )


def _vl_spec(config: PretrainedConfig, name: str, make_vocab_size_divisible_by: int) -> ModelSpec:
    """A Qwen2_5_VLConfig's spec: its text_config as the decoder (a Qwen2: the same checks),
    its vision_config as the vision part, the mrope sections from the text rope parameters."""
    from mindrl.config.model_spec import VisionSpec

    text = config.text_config.to_dict()
    params = dict(text.get("rope_parameters") or {})
    section = params.pop("mrope_section", None)
    if section is None:
        raise ValueError(f"{name}: a Qwen2.5-VL text config without rope mrope_section")
    params.update(rope_type="default")
    text.update(model_type="qwen2", rope_parameters=params,
                tie_word_embeddings=config.tie_word_embeddings)
    decoder = spec_from_hf_config(text, name, make_vocab_size_divisible_by)
    v = config.vision_config
    vision = VisionSpec(depth=v.depth, hidden_size=v.hidden_size,
                        intermediate_size=v.intermediate_size, num_heads=v.num_heads,
                        out_hidden_size=v.out_hidden_size, patch_size=v.patch_size,
                        temporal_patch_size=v.temporal_patch_size,
                        spatial_merge_size=v.spatial_merge_size, window_size=v.window_size,
                        fullatt_block_indexes=tuple(v.fullatt_block_indexes),
                        in_channels=v.in_channels)
    return dataclasses.replace(decoder, mrope_section=tuple(section), vision=vision)
