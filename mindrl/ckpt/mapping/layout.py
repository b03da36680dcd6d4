"""How a rule's tensors are laid out on each side: pure functions over tensors.

- fuse / unfuse: HF q/k/v -> Megatron linear_qkv laid out per query group
  ([q_0..q_{h/g-1}, k, v] for each group g), HF gate/up -> linear_fc1 ([gate; up]).
- vocab padding: Megatron embeds padded_vocab_size rows (a multiple of
  make_vocab_size_divisible_by x TP); the extra rows are zero and are cut on the way back.
- TP shard / gather: along each tensor's split dim. linear_fc1 is special: each TP rank holds
  [gate_r; up_r], not a contiguous slice of [gate; up].
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

from mindrl.ckpt.mapping.rule import FUSE_GATE_UP, FUSE_QKV, TensorRule
from mindrl.config.model_spec import ModelSpec

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
        groups, q_rows, d = _qkv_dims(spec)
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
