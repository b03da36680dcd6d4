"""ModelSpec: one configs/model/NAME.yaml as a typed, checked record.

Everything that needs an architecture number (Megatron builder, tiny-model factory,
converter, config validation, memory estimates) reads it from here.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import yaml

from mindrl.paths import config_dir, model_config_path

ARCHITECTURES = ("qwen2", "llama")
# What the last stage computes: vocabulary logits (policy, reference) or one score per token
# (a reward model: HF *ForSequenceClassification with num_labels=1, tensor score.weight).
HEADS = ("lm", "scalar")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    vocab_size: int
    untie_embeddings_and_output_weights: bool
    norm_epsilon: float
    rotary_base: float
    max_position_embeddings: int
    add_qkv_bias: bool
    kv_channels: Optional[int] = None
    make_vocab_size_divisible_by: int = 1
    head: str = "lm"

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"model {self.name}: architecture={self.architecture!r} is not supported; "
                f"use one of {ARCHITECTURES}")
        if self.head not in HEADS:
            raise ValueError(f"model {self.name}: head={self.head!r} is not supported; "
                             f"use one of {HEADS}")
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"model {self.name}: num_query_groups={self.num_query_groups} must divide "
                f"num_attention_heads={self.num_attention_heads}")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model {self.name}: hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}; set kv_channels explicitly")

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def tied_embeddings(self) -> bool:
        """The output layer is the embedding matrix. Never for a scalar head, which has its
        own [1, hidden] weight whatever the HF config's tie_word_embeddings says."""
        return not self.untie_embeddings_and_output_weights and self.head == "lm"

    def padded_vocab_size(self, tensor_parallel_size: int = 1) -> int:
        """Megatron's vocab rows: a multiple of make_vocab_size_divisible_by x TP."""
        multiple = self.make_vocab_size_divisible_by * tensor_parallel_size
        return int(math.ceil(self.vocab_size / multiple) * multiple)

    def num_parameters(self) -> int:
        """Unpadded parameter count, as the HF checkpoint holds it."""
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_query_groups * d
        attn = h * (q + 2 * kv) + q * h + (q + 2 * kv if self.add_qkv_bias else 0)
        mlp = 3 * h * self.ffn_hidden_size
        layer = attn + mlp + 2 * h
        emb = self.vocab_size * h
        out = h if self.head == "scalar" else 0 if self.tied_embeddings else emb
        return self.num_layers * layer + emb + out + h

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "<dict>") -> "ModelSpec":
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in values if k not in names]
        if unknown:
            key = unknown[0]
            near = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(names)}"
            raise ValueError(f"{source}: unknown model key {key!r}{hint}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.name not in values]
        if required:
            raise ValueError(f"{source}: missing model key(s) {required}")
        return cls(**dict(values))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def available_models() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "model").glob("*.yaml"))


def load_model_spec(name: str) -> ModelSpec:
    """Read configs/model/NAME.yaml; an unknown NAME names the nearest shipped model."""
    path = model_config_path(name)
    if not path.is_file():
        names = available_models()
        near = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise FileNotFoundError(
            f"model {name!r}: no file {path}; {hint}shipped models: {', '.join(names)}")
    with open(path) as f:
        return ModelSpec.from_dict(yaml.safe_load(f), source=str(path))
