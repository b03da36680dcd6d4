"""ModelSpec <-> transformers config, the bridge between our yaml shapes and HF checkpoints.

The tiny-model factory writes HF configs from specs; the checkpoint converter reads specs
back from HF configs. Each family (mindrl/models/families/, by HF model_type) does both
ways and refuses what a spec cannot express (rope scaling, sliding windows, output or MLP
biases), so a conversion never silently drops part of a model.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from transformers import PretrainedConfig

from mindrl.config.model_spec import ModelSpec
from mindrl.models.families import model_family
from mindrl.models.families.dense import TokenIds


def hf_config_from_spec(spec: ModelSpec, torch_dtype: str = "float32",
                        bos_token_id: TokenIds = None, eos_token_id: TokenIds = None,
                        pad_token_id: Optional[int] = None,
                        initializer_range: float = 0.02,
                        vision_token_ids: Optional[Mapping[str, int]] = None) -> PretrainedConfig:
    """The HF config of the spec's family (a Qwen2Config, LlamaConfig, ...; a
    Qwen2_5_VLConfig for a VL spec, whose `vision_token_ids` come from its tokenizer:
    families/qwen25_vl.VISION_TOKEN_KEYS). A scalar-head spec gives a
    *ForSequenceClassification config with num_labels=1."""
    return model_family(spec.family).hf_config(
        spec, torch_dtype, bos_token_id, eos_token_id, pad_token_id, initializer_range,
        vision_token_ids)


def _as_config(config: Union[PretrainedConfig, Mapping[str, Any]]) -> PretrainedConfig:
    if isinstance(config, PretrainedConfig):
        return config
    values = dict(config)
    model_type = values.pop("model_type", None)
    return model_family(model_type).config_class()(**values)


def spec_from_hf_config(config: Union[PretrainedConfig, Mapping[str, Any]], name: str,
                        make_vocab_size_divisible_by: int = 1) -> ModelSpec:
    """The ModelSpec of an HF config (object or config.json dict) of a registered family; a
    *ForSequenceClassification config (num_labels=1) gives a scalar-head spec."""
    config = _as_config(config)
    model_type = getattr(config, "model_type", None)
    try:
        family = model_family(model_type)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return family.spec_from_hf(config, name, make_vocab_size_divisible_by)
