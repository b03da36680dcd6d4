"""THE table of HF <-> Megatron-core tensor names and layouts (DESIGN.md "Names and layouts").

Converter, trainer checkpoint loading and the resharding engine all go through this module.
Three layers of transforms, each a pure function over tensors:

- fuse / unfuse: HF q/k/v -> Megatron linear_qkv laid out per query group
  ([q_0..q_{h/g-1}, k, v] for each group g), HF gate/up -> linear_fc1 ([gate; up]).
- vocab padding: Megatron embeds padded_vocab_size rows (a multiple of
  make_vocab_size_divisible_by x TP); the extra rows are zero and are cut on the way back.
- TP shard / gather: along each tensor's split dim. linear_fc1 is special: each TP rank holds
  [gate_r; up_r], not a contiguous slice of [gate; up].

A "full" Megatron state dict uses global layer numbers and unsplit tensors; pipeline stages
and TP ranks are views of it (`stage_layers`, `shard`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from mindrl.config.model_spec import ModelSpec, VisionSpec

# How the fused tensor is built from its HF parts.
FUSE_NONE, FUSE_QKV, FUSE_GATE_UP = "none", "qkv", "gate_up"


@dataclass(frozen=True)
class TensorRule:
    """One Megatron tensor and the HF tensors it is made of."""

    mcore: str                 # template; {layer} = layer number
    hf: Tuple[str, ...]        # templates of the HF parts, in fusion order
    fuse: str = FUSE_NONE
    tp_dim: Optional[int] = None   # None = replicated across TP ranks
    vocab: bool = False        # rows are vocabulary (padded in Megatron)
    per_layer: bool = False
    # HF part shapes, for tables whose shapes are not the decoder's (the vision tower's).
    shapes: Optional[Tuple[Tuple[int, ...], ...]] = None

    def mcore_name(self, layer: Optional[int] = None) -> str:
        return self.mcore.format(layer=layer)

    def hf_names(self, layer: Optional[int] = None) -> Tuple[str, ...]:
        return tuple(n.format(layer=layer) for n in self.hf)


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
    try:
        return ARCHITECTURE_TABLES[spec.architecture](spec)
    except KeyError:
        raise ValueError(f"no tensor table for architecture {spec.architecture!r}; "
                         f"known: {sorted(ARCHITECTURE_TABLES)}") from None


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


def iter_rules(spec: ModelSpec, vision: Optional[VisionSpec] = None
               ) -> Iterator[Tuple[TensorRule, Optional[int]]]:
    """Every (rule, layer) of the full model, in layer order (stream-friendly); a VL model's
    vision tower (``vision``, default the spec's) last, one tensor per rule, layer None."""
    yield EMBEDDING, None
    for layer in range(spec.num_layers):
        for rule in layer_rules(spec):
            yield rule, layer
    yield FINAL_NORM, None
    head = head_rule(spec)
    if head is not None:
        yield head, None
    vision = vision or spec.vision
    if vision is not None:
        for rule in vision_rules(vision):
            yield rule, None


def hf_tensor_names(spec: ModelSpec) -> List[str]:
    return [name for rule, layer in iter_rules(spec) for name in rule.hf_names(layer)]


# HF tensors that are derived buffers, not weights (older Llama checkpoints store RoPE's
# inv_freq); a converter may skip them without losing anything.
DERIVED_HF_SUFFIXES = ("rotary_emb.inv_freq",)


def is_derived_hf_tensor(name: str) -> bool:
    return name.endswith(DERIVED_HF_SUFFIXES)


# Qwen2.5-VL's vision tower is transformers' own module (mindrl/models/families/qwen25_vl.py):
# in the Megatron model it keeps its HF checkpoint names, whole on every TP rank of the first
# pipeline stage, so its tensors are copied as they are (never fused, padded or split).
VISION_PREFIX = "visual."
# A loaded transformers VL model nests its parts under `model`; checkpoints on disk (and the
# tables above) use the flat names.
_HF_RUNTIME_PREFIXES = (("model.language_model.", "model."), ("model.visual.", VISION_PREFIX))


def hf_disk_name(name: str) -> str:
    """The on-disk HF name of a tensor named as in a loaded transformers model's state_dict
    (`model.language_model.layers.0...` -> `model.layers.0...`); other names are unchanged."""
    for runtime, disk in _HF_RUNTIME_PREFIXES:
        if name.startswith(runtime):
            return disk + name[len(runtime):]
    return name


def is_vision_tensor(name: str) -> bool:
    """An HF (on-disk) or Megatron name of the vision tower: the same name on both sides."""
    return name.startswith(VISION_PREFIX)


def _vision_rule(name: str, *shapes: Tuple[int, ...]) -> TensorRule:
    """One vision tensor: the same name in HF (on disk) and Megatron, replicated, copied."""
    return TensorRule(VISION_PREFIX + name, (VISION_PREFIX + name,), shapes=tuple(shapes))


def _qwen25_vision_rules(v: VisionSpec) -> List[TensorRule]:
    """transformers' Qwen2_5_VisionTransformerPretrainedModel: Conv3d patch embedding (no
    bias), RMSNorm blocks with fused qkv and a biased SwiGLU MLP, a 2x2 patch merger."""
    h, f = v.hidden_size, v.intermediate_size
    merged = h * v.spatial_merge_size ** 2
    rules = [_vision_rule("patch_embed.proj.weight", (h, v.in_channels, v.temporal_patch_size,
                                                      v.patch_size, v.patch_size))]
    for n in range(v.depth):
        block = f"blocks.{n}."
        rules += [
            _vision_rule(block + "norm1.weight", (h,)),
            _vision_rule(block + "norm2.weight", (h,)),
            _vision_rule(block + "attn.qkv.weight", (3 * h, h)),
            _vision_rule(block + "attn.qkv.bias", (3 * h,)),
            _vision_rule(block + "attn.proj.weight", (h, h)),
            _vision_rule(block + "attn.proj.bias", (h,)),
        ]
        for proj, shape in (("gate_proj", (f, h)), ("up_proj", (f, h)), ("down_proj", (h, f))):
            rules += [_vision_rule(f"{block}mlp.{proj}.weight", shape),
                      _vision_rule(f"{block}mlp.{proj}.bias", shape[:1])]
    rules += [
        _vision_rule("merger.ln_q.weight", (h,)),
        _vision_rule("merger.mlp.0.weight", (merged, merged)),
        _vision_rule("merger.mlp.0.bias", (merged,)),
        _vision_rule("merger.mlp.2.weight", (v.out_hidden_size, merged)),
        _vision_rule("merger.mlp.2.bias", (v.out_hidden_size,)),
    ]
    return rules


# One table per vision family, beside ARCHITECTURE_TABLES (the decoders').
VISION_TABLES: Dict[str, Callable[[VisionSpec], List[TensorRule]]] = {
    "qwen2_5_vl": _qwen25_vision_rules,
}


def vision_rules(vision: VisionSpec) -> List[TensorRule]:
    try:
        return VISION_TABLES[vision.family](vision)
    except KeyError:
        raise ValueError(f"no vision tensor table for {vision.family!r}; "
                         f"known: {sorted(VISION_TABLES)}") from None


# ---------------------------------------------------------------- fusion (HF <-> full mcore)

def _qkv_dims(spec: ModelSpec) -> Tuple[int, int, int]:
    groups = spec.num_query_groups
    return groups, spec.num_attention_heads // groups * spec.head_dim, spec.head_dim


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """[q; k; v] (HF) -> per-group [q_g, k_g, v_g] (Megatron). Works for weights and biases."""
    groups, q_rows, d = _qkv_dims(spec)
    tail = q.shape[1:]
    return torch.cat([q.reshape(groups, q_rows, *tail), k.reshape(groups, d, *tail),
                      v.reshape(groups, d, *tail)], dim=1).reshape(-1, *tail)


def unfuse_qkv(qkv: torch.Tensor, spec: ModelSpec) -> Tuple[torch.Tensor, ...]:
    groups, q_rows, d = _qkv_dims(spec)
    tail = qkv.shape[1:]
    grouped = qkv.reshape(groups, q_rows + 2 * d, *tail)
    q, k, v = torch.split(grouped, [q_rows, d, d], dim=1)
    return tuple(t.reshape(-1, *tail).contiguous() for t in (q, k, v))


def pad_vocab(t: torch.Tensor, padded_rows: int) -> torch.Tensor:
    if t.shape[0] > padded_rows:
        raise ValueError(f"vocab rows {t.shape[0]} exceed the padded size {padded_rows}")
    if t.shape[0] == padded_rows:
        return t
    return torch.cat([t, t.new_zeros(padded_rows - t.shape[0], *t.shape[1:])])


def hf_to_mcore(rule: TensorRule, parts: Sequence[torch.Tensor], spec: ModelSpec,
                padded_vocab: int) -> torch.Tensor:
    """HF parts -> the full (unsplit) Megatron tensor."""
    if rule.fuse == FUSE_QKV:
        full = fuse_qkv(*parts, spec)
    elif rule.fuse == FUSE_GATE_UP:
        full = torch.cat(parts, dim=0)
    else:
        (full,) = parts
    return pad_vocab(full, padded_vocab) if rule.vocab else full


def mcore_to_hf(rule: TensorRule, full: torch.Tensor, spec: ModelSpec,
                layer: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """Full Megatron tensor -> {HF name: tensor}, padding removed."""
    names = rule.hf_names(layer)
    if rule.vocab:
        full = full[: spec.vocab_size]
    if rule.fuse == FUSE_QKV:
        parts = unfuse_qkv(full, spec)
    elif rule.fuse == FUSE_GATE_UP:
        parts = tuple(t.contiguous() for t in torch.chunk(full, 2, dim=0))
    else:
        parts = (full,)
    return dict(zip(names, parts))


def mcore_part_views(rule: TensorRule, full: torch.Tensor,
                     spec: ModelSpec) -> Tuple[torch.Tensor, ...]:
    """Writable views of a full Megatron tensor, one per HF part (in rule.hf order).

    Filling them with the HF parts builds ``full`` in place, as hf_to_mcore would, without a
    temporary. A view is shaped like its part when contiguous; the q/k/v views are strided
    (groups, rows, ...) and take ``part.view(view.shape)``. Vocab padding rows are not
    covered: the caller zeroes ``full[spec.vocab_size:]``.
    """
    if rule.vocab:
        full = full[: spec.vocab_size]
    if rule.fuse == FUSE_QKV:
        groups, q_rows, d = _qkv_dims(spec)
        grouped = full.view(groups, q_rows + 2 * d, *full.shape[1:])
        return (grouped[:, :q_rows], grouped[:, q_rows:q_rows + d], grouped[:, q_rows + d:])
    if rule.fuse == FUSE_GATE_UP:
        return tuple(torch.chunk(full, 2, dim=0))
    return (full,)


def expected_hf_shapes(rule: TensorRule, spec: ModelSpec) -> Tuple[Tuple[int, ...], ...]:
    """Shapes the HF parts must have; the converter checks them before any work."""
    if rule.shapes is not None:
        return rule.shapes
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


# ---------------------------------------------------------------- TP shard / gather

def shard(rule: TensorRule, full: torch.Tensor, tp_rank: int, tp_size: int) -> torch.Tensor:
    """This TP rank's slice of a full Megatron tensor."""
    if rule.tp_dim is None or tp_size == 1:
        return full
    if rule.fuse == FUSE_GATE_UP:
        gate, up = torch.chunk(full, 2, dim=0)
        return torch.cat([torch.chunk(gate, tp_size, 0)[tp_rank],
                          torch.chunk(up, tp_size, 0)[tp_rank]]).contiguous()
    if full.shape[rule.tp_dim] % tp_size:
        raise ValueError(f"{rule.mcore}: dim {rule.tp_dim} of size {full.shape[rule.tp_dim]} "
                         f"does not split into TP={tp_size}")
    return torch.chunk(full, tp_size, dim=rule.tp_dim)[tp_rank].contiguous()


def gather(rule: TensorRule, shards: Sequence[torch.Tensor]) -> torch.Tensor:
    """Inverse of `shard` over all TP ranks' slices (in rank order)."""
    if rule.tp_dim is None or len(shards) == 1:
        return shards[0]
    if rule.fuse == FUSE_GATE_UP:
        halves = [torch.chunk(s, 2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return torch.cat(list(shards), dim=rule.tp_dim)


def write_shard(rule: TensorRule, spec: ModelSpec, local: torch.Tensor, tp_rank: int,
                tp_size: int, dests) -> None:
    """Copy TP rank `tp_rank`'s Megatron shard into its places in the full HF parts `dests`
    (in rule.hf order); all ranks together fill them as `mcore_to_hf(gather(shards))` would.
    A replicated tensor is written by TP rank 0 only. Casts to the destination dtype."""
    if rule.tp_dim is None or tp_size == 1:
        if tp_rank != 0:
            return
        tp_size, tp_rank = 1, 0
    if rule.vocab:
        (dest,) = dests
        rows = local.shape[0]
        start = tp_rank * rows
        n = max(0, min(spec.vocab_size - start, rows))
        if n:
            dest[start:start + n].copy_(local[:n])
        return
    if rule.tp_dim == 1:
        (dest,) = dests
        torch.chunk(dest, tp_size, dim=1)[tp_rank].copy_(local)
        return
    if rule.fuse == FUSE_QKV:
        groups, d = spec.num_query_groups, spec.head_dim
        q_rows = spec.num_attention_heads // groups * d
        local_groups = groups // tp_size
        tail = local.shape[1:]
        grouped = local.view(local_groups, q_rows + 2 * d, *tail)
        srcs = (grouped[:, :q_rows], grouped[:, q_rows:q_rows + d], grouped[:, q_rows + d:])
        lo = tp_rank * local_groups
        for dest, src in zip(dests, srcs):
            dest.view(groups, -1, *tail)[lo:lo + local_groups].copy_(src)
        return
    srcs = torch.chunk(local, 2, dim=0) if rule.fuse == FUSE_GATE_UP else (local,)
    for dest, src in zip(dests, srcs):
        torch.chunk(dest, tp_size, dim=0)[tp_rank].copy_(src)


def shards_are_row_blocks(rule: TensorRule) -> bool:
    """True when TP rank r's shard is the r-th block of rows of the full tensor (`gather` is a
    concatenation along dim 0), so shards can be received straight into place."""
    return rule.tp_dim == 0 and rule.fuse != FUSE_GATE_UP


# ---------------------------------------------------------------- pipeline stages

def stage_layers(num_layers: int, pp_rank: int, pp_size: int) -> range:
    """Global layer numbers held by a pipeline stage (Megatron's even split)."""
    if num_layers % pp_size:
        raise ValueError(f"num_layers={num_layers} does not split into PP={pp_size}")
    per_stage = num_layers // pp_size
    return range(pp_rank * per_stage, (pp_rank + 1) * per_stage)


_LAYER_RE = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")


def rules_by_mcore_suffix(spec: ModelSpec, vision: Optional[VisionSpec] = None
                          ) -> Dict[str, TensorRule]:
    table = {r.mcore.split("{layer}.", 1)[1]: r for r in layer_rules(spec)}
    table.update({r.mcore: r for r in (EMBEDDING, FINAL_NORM, head_rule(spec) or OUTPUT)})
    vision = vision or spec.vision
    if vision is not None:
        table.update({r.mcore: r for r in vision_rules(vision)})
    return table


def rule_for(mcore_name: str, spec: ModelSpec, vision: Optional[VisionSpec] = None
             ) -> Tuple[TensorRule, Optional[int]]:
    """(rule, global-or-local layer) for a Megatron parameter name."""
    table = rules_by_mcore_suffix(spec, vision)
    m = _LAYER_RE.match(mcore_name)
    key, layer = (m.group(2), int(m.group(1))) if m else (mcore_name, None)
    if key not in table:
        raise KeyError(f"Megatron tensor {mcore_name!r} has no entry in mindrl/ckpt/mapping.py")
    return table[key], layer


def stage_state_dict(full: Dict[str, torch.Tensor], spec: ModelSpec, tp_rank: int,
                     tp_size: int, pp_rank: int, pp_size: int,
                     vision: Optional[VisionSpec] = None) -> Dict[str, torch.Tensor]:
    """The local state dict of one (TP, PP) rank from a full Megatron state dict.

    Layers are renumbered from 0 within the stage, as Megatron's modules name them. With tied
    embeddings and PP > 1 the last stage holds its own copy of the embedding as output_layer.
    A VL model's vision tower is whole on every TP rank of the first stage.
    """
    layers = stage_layers(spec.num_layers, pp_rank, pp_size)
    first, last = pp_rank == 0, pp_rank == pp_size - 1
    out: Dict[str, torch.Tensor] = {}
    if first:
        out[EMBEDDING.mcore] = shard(EMBEDDING, full[EMBEDDING.mcore], tp_rank, tp_size)
        for rule in vision_rules(vision or spec.vision) if (vision or spec.vision) else ():
            out[rule.mcore] = full[rule.mcore]
    for local, layer in enumerate(layers):
        for rule in layer_rules(spec):
            out[rule.mcore_name(local)] = shard(rule, full[rule.mcore_name(layer)], tp_rank, tp_size)
    if last:
        out[FINAL_NORM.mcore] = full[FINAL_NORM.mcore]
        head = head_rule(spec)
        if head is not None:
            out[head.mcore] = shard(head, full[head.mcore], tp_rank, tp_size)
        elif pp_size > 1:
            out[OUTPUT.mcore] = shard(OUTPUT, full[EMBEDDING.mcore], tp_rank, tp_size)
    return out


def full_mcore_from_hf(hf: Dict[str, torch.Tensor], spec: ModelSpec, tp_size: int = 1,
                       vision: Optional[VisionSpec] = None) -> Dict[str, torch.Tensor]:
    """Whole HF state dict (on-disk names) -> full Megatron state dict (small models, tests,
    resharding)."""
    padded = spec.padded_vocab_size(tp_size)
    return {rule.mcore_name(layer): hf_to_mcore(rule, [hf[n] for n in rule.hf_names(layer)],
                                                spec, padded)
            for rule, layer in iter_rules(spec, vision)}
