"""Conversion as a byte copy: which input bytes make each output tensor.

Between HF and Megatron most of a checkpoint needs no transform: embeddings, o_proj,
down_proj and norms are the same bytes, gate and up are saved as two pieces of linear_fc1,
and q/k/v differ only in the order of blocks of rows (Megatron interleaves them per query
group). So when the dtype is kept, every output tensor is a list of row ranges of input
tensors (plus zero rows for vocab padding), which the writers copy from file to file through
``fastio.DirectWriter`` without holding any tensor in memory. The row order is derived from
``mapping.mcore_part_views``, so that the layout is decided in mapping only. Anything
else (a cast, a torch pickle, a checkpoint saved split along columns) gets None here and
goes through memory as before.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple

import torch

from mindrl.ckpt import distcp_reader, fastio, mapping
from mindrl.config.model_spec import ModelSpec

Run = Tuple[int, int, int, int]  # (Megatron row, HF part, first row in that part, rows)


@functools.lru_cache(maxsize=64)  # the same for every layer
def row_runs(rule: mapping.TensorRule, spec: ModelSpec, rows: int) -> Tuple[Run, ...]:
    """The rows of a full Megatron tensor of ``rows`` rows as maximal runs of consecutive
    rows of one HF part, in Megatron row order; rows of no part (vocab padding) are left out.
    """
    part = torch.full((rows,), -1, dtype=torch.long)
    part_row = torch.zeros(rows, dtype=torch.long)
    for i, view in enumerate(mapping.mcore_part_views(rule, torch.arange(rows), spec)):
        index = view.reshape(-1)
        part[index] = i
        part_row[index] = torch.arange(index.numel())
    starts = torch.ones(rows, dtype=torch.bool)
    starts[1:] = (part[1:] != part[:-1]) | (part_row[1:] != part_row[:-1] + 1)
    bounds = starts.nonzero().flatten().tolist() + [rows]
    return tuple((b, int(part[b]), int(part_row[b]), e - b)
                 for b, e in zip(bounds, bounds[1:]) if part[b] >= 0)


def _row_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return fastio.nbytes(tuple(shape[1:]), dtype)


def mcore_pieces(rule: mapping.TensorRule, layer: Optional[int], spec: ModelSpec,
                 shape: Sequence[int], dtype: torch.dtype, weights
                 ) -> Optional[List[fastio.Piece]]:
    """The Megatron tensor (rule, layer) of ``shape`` and ``dtype`` as pieces of the HF
    files (hf_io.HFWeights), in its row order, vocab padding as zeros; None when a part
    must be computed (another dtype, a torch pickle)."""
    sources = [weights.file_bytes(name) if weights.dtype(name) == dtype else None
               for name in rule.hf_names(layer)]
    if any(source is None for source in sources):
        return None
    row = _row_bytes(shape, dtype)
    runs = row_runs(rule, spec, shape[0])
    for i, source in enumerate(sources):
        if source.nbytes != row * sum(r[3] for r in runs if r[1] == i):
            return None  # not the shape the layout implies: read_into reports it
    pieces: List[fastio.Piece] = []
    at = 0
    for first, part, part_row, rows in runs:
        if first > at:
            pieces.append(fastio.Zeros((first - at) * row))
        pieces.append(sources[part].part(part_row * row, rows * row))
        at = first + rows
    if at < shape[0]:
        pieces.append(fastio.Zeros((shape[0] - at) * row))
    return pieces


def hf_pieces(rule: mapping.TensorRule, spec: ModelSpec, entry, reader, dtype: torch.dtype
              ) -> Optional[List[List[fastio.FileBytes]]]:
    """For each HF part of a Megatron sharded-state-dict entry (rule.hf order), its bytes
    as pieces of the checkpoint files (distcp_reader.DistcpReader) in HF row order; None
    when any must be gathered through memory (another dtype, a split along columns)."""
    boxes = distcp_reader.row_boxes(entry)
    if boxes is None:
        return None
    shape = distcp_reader.entry_layout(entry)[0]
    runs = row_runs(rule, spec, shape[0])
    parts = []
    for i in range(len(rule.hf)):
        pieces: List[fastio.FileBytes] = []
        for first, _, _, rows in sorted((r for r in runs if r[1] == i), key=lambda r: r[2]):
            got = _rows_pieces(first, rows, boxes, tuple(shape[1:]), reader, dtype)
            if got is None:
                return None
            pieces += got
        parts.append(pieces)
    return parts


def _rows_pieces(first: int, rows: int, boxes, tail: Tuple[int, ...], reader,
                 dtype: torch.dtype) -> Optional[List[fastio.FileBytes]]:
    """Local rows [first, first + rows) of an entry as pieces of the checkpoint files."""
    pieces: List[fastio.FileBytes] = []
    found = 0
    for start, count, key, offsets, axis in boxes:
        lo, hi = max(first, start), min(first + rows, start + count)
        if lo >= hi:
            continue
        at = list(offsets)
        at[axis] += lo - start
        got = reader.box_pieces(key, at, (1,) * axis + (hi - lo,) + tail, dtype)
        if got is None:
            return None
        pieces += got
        found += hi - lo
    return pieces if found == rows else None
