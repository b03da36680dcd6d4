"""ModelSpec: one configs/model/NAME.yaml as a typed, checked record.

Everything that needs an architecture number (Megatron builder, tiny-model factory,
converter, config validation, memory estimates) reads it from here.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

import yaml

from mindrl.config import names
from mindrl.paths import config_dir, model_config_path

# What the last stage computes: vocabulary logits (policy, reference) or one score per token
# (a reward model: HF *ForSequenceClassification with num_labels=1, tensor score.weight).
HEADS = ("lm", "scalar")



@dataclass(frozen=True)
class VisionSpec:
    """A VL model's vision tower (the `vision:` block of configs/model/NAME.yaml): the sizes
    of transformers' own tower for `family`, which mindrl/models/families/ puts before the
    decoder. Field names follow the HF vision_config."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int             # the merger's output: the decoder's hidden size
    family: str = "qwen2_5_vl"
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    window_size: int = 112
    fullatt_block_indexes: Tuple[int, ...] = (7, 15, 23, 31)
    in_channels: int = 3

    def check(self, where: str) -> None:
        if self.family not in names.VISION_FAMILIES:
            raise ValueError(f"{where}: vision.family={self.family!r} is not supported; use one "
                             f"of {names.VISION_FAMILIES}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"{where}: vision.num_heads={self.num_heads} must divide "
                             f"vision.hidden_size={self.hidden_size}")
        bad = [i for i in self.fullatt_block_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"{where}: vision.fullatt_block_indexes {bad} are not blocks of a "
                             f"tower of depth {self.depth}")

    def num_parameters(self) -> int:
        """The tower's parameters, as the HF checkpoint holds them (visual.*)."""
        h, f = self.hidden_size, self.intermediate_size
        merged = h * self.spatial_merge_size ** 2
        patch = h * self.in_channels * self.temporal_patch_size * self.patch_size ** 2
        block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 3 * h * f + 2 * f + h
        merger = h + merged * merged + merged + self.out_hidden_size * merged \
            + self.out_hidden_size
        return patch + self.depth * block + merger


@dataclass(frozen=True)
class MoESpec:
    """A Mixture-of-Experts decoder's expert layers (the `moe:` block of
    configs/model/NAME.yaml), as HF Qwen3-MoE's config names them: `num_experts` experts of
    `ffn_hidden_size` (HF moe_intermediate_size) per MoE layer, `router_topk` of them per token
    (HF num_experts_per_tok), their weights renormalised to sum 1 when `norm_topk_prob`;
    `dense_layers` (HF mlp_only_layers) keep a dense MLP of the spec's ffn_hidden_size."""

    num_experts: int
    router_topk: int
    ffn_hidden_size: int
    norm_topk_prob: bool = True
    dense_layers: Tuple[int, ...] = ()

    def check(self, where: str, num_layers: int) -> None:
        if self.num_experts < 1 or not 1 <= self.router_topk <= self.num_experts:
            raise ValueError(f"{where}: moe.router_topk={self.router_topk} must be in "
                             f"[1, moe.num_experts={self.num_experts}]")
        bad = [i for i in self.dense_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"{where}: moe.dense_layers {bad} are not layers of a model with "
                             f"num_layers={num_layers}")

    def is_moe_layer(self, layer: int) -> bool:
        return layer not in self.dense_layers


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
    # A VL model: the decoder above (architecture qwen2) with multimodal RoPE (temporal,
    # height, width rotary pairs, summing to head_dim / 2) and a vision tower. Text models
    # have neither, and code that does not care about images never reads them.
    mrope_section: Optional[Tuple[int, ...]] = None
    vision: Optional[VisionSpec] = None
    # A Mixture-of-Experts decoder (architecture qwen3_moe); dense models have none.
    moe: Optional[MoESpec] = None

    def __post_init__(self) -> None:
        if self.architecture not in names.ARCHITECTURES:
            raise ValueError(
                f"model {self.name}: architecture={self.architecture!r} is not supported; "
                f"use one of {names.ARCHITECTURES}")
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
        self._check_vision()
        if (self.moe is not None) != (self.architecture in names.MOE_ARCHITECTURES):
            raise ValueError(f"model {self.name}: architecture {self.architecture!r} "
                             f"{'needs' if self.moe is None else 'takes no'} `moe:` block "
                             f"(Mixture-of-Experts architectures: {names.MOE_ARCHITECTURES})")
        if self.moe is not None:
            self.moe.check(f"model {self.name}", self.num_layers)

    def _check_vision(self) -> None:
        where = f"model {self.name}"
        if (self.vision is None) != (self.mrope_section is None):
            raise ValueError(f"{where}: a VL model sets both vision and mrope_section, a text "
                             f"model neither (vision={'set' if self.vision else 'unset'}, "
                             f"mrope_section={self.mrope_section})")
        if self.vision is None:
            return
        self.vision.check(where)
        if 2 * sum(self.mrope_section) != self.head_dim:
            raise ValueError(f"{where}: mrope_section {list(self.mrope_section)} must sum to "
                             f"head_dim / 2 = {self.head_dim // 2}")
        if self.vision.out_hidden_size != self.hidden_size:
            raise ValueError(f"{where}: vision.out_hidden_size={self.vision.out_hidden_size} "
                             f"must equal hidden_size={self.hidden_size} (the merger feeds the "
                             f"decoder)")
        if self.head != "lm":
            raise ValueError(f"{where}: a VL model has an lm head (head={self.head!r})")

    @property
    def is_multimodal(self) -> bool:
        return self.vision is not None

    @property
    def family(self) -> str:
        """The registered family (HF model_type) this spec is a model of: the vision family
        of a VL model, else the decoder's architecture."""
        return self.vision.family if self.vision is not None else self.architecture

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

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def mlp_parameters(self, active: bool = False) -> int:
        """The MLPs' parameters over all layers: a dense layer's gate, up and down; a MoE
        layer's router and its experts, only the top-k a token passes through when
        ``active`` (what the FLOP model counts)."""
        h = self.hidden_size
        dense = 3 * h * self.ffn_hidden_size
        if self.moe is None:
            return self.num_layers * dense
        moe = self.moe
        experts = moe.router_topk if active else moe.num_experts
        sparse = h * moe.num_experts + experts * 3 * h * moe.ffn_hidden_size
        return sum(sparse if moe.is_moe_layer(i) else dense for i in range(self.num_layers))

    def num_parameters(self, active: bool = False) -> int:
        """Unpadded parameter count, as the HF checkpoint holds it. ``active``: the parameters
        one token passes through (a MoE layer's router and its top-k experts only); equal to
        the total for a dense model."""
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_query_groups * d
        attn = h * (q + 2 * kv) + q * h + (q + 2 * kv if self.add_qkv_bias else 0)
        qk_norms = 2 * d if self.architecture in names.QK_NORM_ARCHITECTURES else 0
        layers = self.num_layers * (attn + 2 * h + qk_norms) + self.mlp_parameters(active)
        emb = self.vocab_size * h
        out = h if self.head == "scalar" else 0 if self.tied_embeddings else emb
        vision = self.vision.num_parameters() if self.vision else 0
        return layers + emb + out + h + vision

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "<dict>") -> "ModelSpec":
        _check_keys(cls, values, source, "model")
        values = dict(values)
        if values.get("mrope_section") is not None:
            values["mrope_section"] = tuple(values["mrope_section"])
        if values.get("vision") is not None and not isinstance(values["vision"], VisionSpec):
            values["vision"] = _vision_from_dict(values["vision"], source)
        if values.get("moe") is not None and not isinstance(values["moe"], MoESpec):
            _check_keys(MoESpec, values["moe"], source, "moe")
            moe = dict(values["moe"])
            moe["dense_layers"] = tuple(moe.get("dense_layers") or ())
            values["moe"] = MoESpec(**moe)
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_keys(cls, values: Mapping[str, Any], source: str, what: str) -> None:
    """An unknown key (with the nearest known one) or a missing required key of dataclass
    `cls` fails naming the file and the key."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    if unknown:
        near = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(names)}"
        raise ValueError(f"{source}: unknown {what} key {unknown[0]!r}{hint}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.name not in values]
    if required:
        raise ValueError(f"{source}: missing {what} key(s) {required}")


def _vision_from_dict(values: Mapping[str, Any], source: str) -> VisionSpec:
    _check_keys(VisionSpec, values, source, "vision")
    values = dict(values)
    if "fullatt_block_indexes" in values:
        values["fullatt_block_indexes"] = tuple(values["fullatt_block_indexes"])
    return VisionSpec(**values)


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
