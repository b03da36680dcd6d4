"""Vocabulary rows across a TP change, for a training checkpoint's model and optimizer state.

Megatron pads the embedding / output rows to a multiple of make_vocab_size_divisible_by x TP,
so the same model saved at TP1 and loaded at TP2 can have different row counts (Qwen2.5's
151936 rows are 152064 at TP2). The padded rows are zero and never score, so their gradients,
and therefore their Adam moments, stay zero: each rank reads the rows it shares with the
saved tensor and zeroes the rest, in the model and in every optimizer tensor named after a
vocab tensor ("optimizer.state.exp_avg.embedding.word_embeddings.weight").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

import torch

from mindrl import device
from mindrl.ckpt.mapping import EMBEDDING, OUTPUT

VOCAB_KEYS = (EMBEDDING.mcore, OUTPUT.mcore)
Path = Tuple[Any, ...]
RowFix = Tuple[Path, Tuple[int, ...], torch.dtype, int]   # (path, local shape, dtype, rows read)


def _is_vocab(key: str) -> bool:
    return any(key == k or key.endswith("." + k) for k in VOCAB_KEYS)


def _items(node):
    return list(node.items()) if isinstance(node, dict) else []


def fit_vocab_rows(state: Dict, saved_shapes: Dict[str, Tuple[int, ...]]) -> List[RowFix]:
    """Point each vocab-row ShardedTensor in the (nested) request at the rows it shares with
    the saved tensor, in place; a tensor with none in common is dropped. Returns what
    `finish_vocab_rows` needs to give the loaded tensors their local shape back."""
    from megatron.core.dist_checkpointing import ShardedTensor

    fixes: List[RowFix] = []

    def walk(node, path: Path):
        for k, sh in _items(node):
            if not isinstance(sh, ShardedTensor):
                walk(sh, path + (k,))
                continue
            saved = saved_shapes.get(sh.key)
            if not _is_vocab(sh.key) or saved is None or saved[0] == sh.global_shape[0]:
                continue
            start, rows = sh.global_offset[0], sh.local_shape[0]
            n = max(0, min(rows, saved[0] - start))
            fixes.append((path + (k,), tuple(sh.local_shape), sh.data.dtype
                          if sh.data is not None else sh.dtype, n))
            if n == 0:      # nothing to read: drop it (Megatron's state nests dicts only)
                del node[k]
                continue
            node[k] = dataclasses.replace(
                sh, data=None if sh.data is None else sh.data[:n],
                local_shape=(n, *sh.local_shape[1:]), global_shape=(saved[0], *saved[1:]),
                axis_fragmentations=None)

    walk(state, ())
    return fixes


def finish_vocab_rows(loaded: Dict, fixes: List[RowFix]) -> None:
    """Replace each trimmed tensor in the loaded state by its full local shape: the rows read,
    then zeros."""
    for path, shape, dtype, n in fixes:
        parent = loaded
        for k in path[:-1]:
            parent = parent[k]
        read = parent[path[-1]] if n else None
        full = torch.zeros(shape, dtype=dtype if read is None else read.dtype,
                           device=device.current_device() if read is None else read.device)
        if n:
            full[:n] = read
        parent[path[-1]] = full
