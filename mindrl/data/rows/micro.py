"""A plan's micro batches as Megatron's model inputs, and the readings back from them.

Rollouts arrive as left-padded prompts [B, P] and right-padded responses [B, R]. A micro batch
(the sample indices a plan from plans.py gives this rank) becomes one of two layouts:
- padded rows (padded.py), every row as long as the rank's longest;
- packed (packed.py): no padding but a tail to a multiple of TP (sequence parallel) or to the
  rank's longest pack (pipeline stages exchange tensors of one shape).
Each micro batch is a dict on this rank's device: the row(s), the logit position of every
response token (`positions` [mb, R], indexing the packed row when packed), each sample's last
real token (`last_positions`), its prompt length (a multimodal model places image features in
the prompt only), and the Batch's fields for those samples (tensors sliced, per-sample lists
such as images picked).
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch

from mindrl.algorithms.objective import trained_tokens
from mindrl.data.batch import Batch
from mindrl.data.rows.packed import packed_rows, sample_lengths
from mindrl.data.rows.padded import padded_rows


def next_token_targets(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """targets[:, j] = tokens[:, j + 1] (the last position predicts padding, ignored). In a
    packed row a sample's last position predicts the next sample's first token: never read
    (`positions` stop one before each sample's last token)."""
    return torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], pad_id)], dim=1)


def _to(value, target: torch.device):
    """A field's value on the rank's device: tensors moved, per-sample lists element-wise."""
    if isinstance(value, torch.Tensor):
        return value.to(target, non_blocking=True)
    if isinstance(value, list):
        return [_to(v, target) for v in value]
    return value


def _packed_params(cu_seqlens: torch.Tensor, max_seqlen: int, host_cu_seqlens: List[int]):
    """Megatron's thd parameters; `host_cu_seqlens` spares the per-sequence attention a
    device-to-host copy in every layer."""
    from megatron.core.packed_seq_params import PackedSeqParams

    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu_seqlens,
                             cu_seqlens_kv=cu_seqlens, max_seqlen_q=max_seqlen,
                             max_seqlen_kv=max_seqlen)
    params.host_cu_seqlens = host_cu_seqlens
    return params


def _padded_micro_batches(batch: Batch, micro: Sequence[Sequence[int]], pad_id: int,
                          multiple_of: int):
    order = [i for m in micro for i in m]
    local = batch.select(order)
    rows = padded_rows(local["prompt_ids"], local["prompt_mask"], local["response_ids"],
                       pad_id=pad_id, multiple_of=multiple_of)
    positions = rows.response_positions()
    last = sample_lengths(local["prompt_mask"], local["response_mask"]) - 1
    out, start = [], 0
    for indices in micro:
        part = slice(start, start + len(indices))
        start += len(indices)
        tokens = rows.tokens[part]
        out.append((local.select(range(part.start, part.stop)), {
            "tokens": tokens,
            "position_ids": torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens),
            "positions": positions[part], "last_positions": last[part],
            "prompt_lengths": rows.prompt_lengths[part]}))
    return out, int(rows.tokens.shape[1])


def _packed_micro_batches(batch: Batch, micro: Sequence[Sequence[int]], pad_id: int,
                          multiple_of: int, common_length: bool):
    lengths = sample_lengths(batch["prompt_mask"], batch["response_mask"])
    longest = max(-(-int(lengths[list(m)].sum()) // multiple_of) * multiple_of for m in micro)
    out = []
    for indices in micro:
        part = batch.select(indices)
        rows = packed_rows(part["prompt_ids"], part["prompt_mask"], part["response_ids"],
                           part["response_mask"], pad_id=pad_id, multiple_of=multiple_of,
                           pad_to=longest if common_length else None)
        out.append((part, {
            "tokens": rows.tokens, "position_ids": rows.position_ids,
            "positions": rows.response_positions(), "last_positions": rows.last_positions(),
            "prompt_lengths": rows.prompt_lengths, "cu_seqlens": rows.cu_seqlens,
            "max_seqlen": rows.max_seqlen,
            "response_index": real_response_entries(trained_tokens(part))}))
    return out, longest


def real_response_entries(loss_mask: torch.Tensor) -> torch.Tensor:
    """[n] flat indices into [mb * R] of the trained response tokens (loss_mask's ones), found
    on the host before the micro batch moves: the vocabulary maths of a packed micro batch
    runs on these alone, not on the padding of every shorter response (about 60% of [mb, R]
    at RL's natural lengths) nor on an episode's inserted tokens, whose log-probs nothing
    reads (0 there, as on padding)."""
    return loss_mask.reshape(-1).nonzero()[:, 0]


def micro_batches(batch: Batch, micro: Sequence[Sequence[int]], target: torch.device,
                  pad_id: int = 0, multiple_of: int = 1, packed: bool = False,
                  common_length: bool = False) -> tuple[List[Dict[str, object]], int]:
    """The schedule's micro batches (`micro`: sample indices of `batch` per micro batch) and
    their sequence length (padded: every row as long as the longest; packed: the longest pack,
    which every pack is padded to when `common_length`, as pipeline parallelism needs)."""
    if not micro or any(not m for m in micro):
        raise ValueError(f"every micro batch needs at least one sample, got sizes "
                         f"{[len(m) for m in micro]}")
    build = (_packed_micro_batches(batch, micro, pad_id, multiple_of, common_length) if packed
             else _padded_micro_batches(batch, micro, pad_id, multiple_of))
    rows, seq_length = build
    out = []
    for part, inputs in rows:       # each micro batch's samples, selected once
        fields = {**part.tensors, **part.meta, **inputs}
        host_cu_seqlens = fields["cu_seqlens"].tolist() if packed else None
        fields = {k: _to(v, target) for k, v in fields.items()}
        if packed:
            fields["packed_seq_params"] = _packed_params(
                fields.pop("cu_seqlens"), fields.pop("max_seqlen"), host_cu_seqlens)
        out.append(fields)
    return out, seq_length


def at_positions(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """values [mb, S, ...] at positions [mb, k] per row -> [mb, k, ...]; or, from one packed
    row [1, T, ...], every sample's positions in that row."""
    if values.shape[0] == 1:
        return values[0][positions]
    index = positions.reshape(*positions.shape, *([1] * (values.dim() - 2)))
    return values.gather(1, index.expand(*positions.shape, *values.shape[2:]))
