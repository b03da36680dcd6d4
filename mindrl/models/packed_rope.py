"""Rotary embeddings on a packed (thd) row in one pass, frequencies built once per row.

Megatron's unfused thd RoPE (`rope_utils._apply_rotary_pos_emb_thd`) splits the packed row
into its sequences in every layer, for the query and again for the key, slices each
sequence's frequencies in a Python loop (reading each sequence's offset with `.item()`, a
device sync per sequence on a GPU, when the frequencies are already per token, as M-RoPE's
are), concatenates them and recomputes cos and sin: at the 75M bench shape 628 concatenations
per update on CPU, at the tiny shape a quarter of the attention's forward time. Here the
row's frequencies are gathered with one index (each token's position inside its sequence;
per-token frequencies are already that), and the row's cos / sin are computed once and kept
while the same row goes through every layer (the same frequency and cu_seqlens tensors:
GPTModel makes them once per forward). The maths is Megatron's bshd formula on the same
values, so results are bit-identical (tests/models/test_packed_rope.py).

Megatron's own function still runs where this does not apply: padded rows (no cu_seqlens),
context parallelism, fused RoPE, multi-latent attention, interleaved rotary.
"""

from __future__ import annotations

import torch
from megatron.core.models.common.embeddings import rope_utils

_megatron_apply = rope_utils.apply_rotary_pos_emb


def token_positions(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Each token's position inside its own sequence, [total], from cu_seqlens [n + 1]
    (`output_size` keeps the count on the host: no device sync)."""
    starts = cu_seqlens[:-1].long()
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    first = torch.repeat_interleave(starts, lengths, output_size=total)
    return torch.arange(total, device=cu_seqlens.device) - first


def packed_frequencies(freqs: torch.Tensor, cu_seqlens: torch.Tensor, total: int):
    """The row's [total, 1, 1, dim] frequencies: `freqs` itself where it is already per token
    (Megatron's offset case), else the first rows of `freqs` for each sequence."""
    if freqs.size(0) == total:
        return freqs
    return freqs.index_select(0, token_positions(cu_seqlens, total))


class _RowCache:
    """cos / sin of the row being run: one entry, keyed by the identity (and in-place version)
    of the frequency and cu_seqlens tensors it came from, held so that their ids cannot be
    reused while cached."""

    def __init__(self):
        self.tensors, self.meta, self.value = (None, None), None, None

    def cos_sin(self, freqs, cu_seqlens, total: int, mscale: float, dtype):
        meta = (freqs._version, cu_seqlens._version, total, mscale, dtype)
        if not (self.tensors[0] is freqs and self.tensors[1] is cu_seqlens
                and self.meta == meta):
            row = packed_frequencies(freqs, cu_seqlens, total)
            # Megatron's bshd formula, its order of operations kept.
            self.value = ((torch.cos(row) * mscale).to(dtype), (torch.sin(row) * mscale).to(dtype))
            self.tensors, self.meta = (freqs, cu_seqlens), meta
        return self.value


_cache = _RowCache()


def apply_rotary_pos_emb(t, freqs, config, cu_seqlens=None, mscale: float = 1.0, cp_group=None):
    """Megatron's `apply_rotary_pos_emb`, with packed rows done in one pass."""
    if (cu_seqlens is None or config.apply_rope_fusion or config.multi_latent_attention
            or config.rotary_interleaved or (cp_group is not None and cp_group.size() > 1)):
        return _megatron_apply(t, freqs, config, cu_seqlens=cu_seqlens, mscale=mscale,
                               cp_group=cp_group)
    cos_, sin_ = _cache.cos_sin(freqs, cu_seqlens, t.shape[0], mscale, t.dtype)
    x = t.unsqueeze(1)                                   # [T, 1, heads, d], as Megatron's
    rot = cos_.shape[-1]
    x, x_pass = x[..., :rot], x[..., rot:]
    x = (x * cos_) + (rope_utils._rotate_half(x, False) * sin_)
    return torch.cat((x, x_pass), dim=-1).squeeze(1)


def install() -> None:
    """Route Megatron's attention (the only caller of the thd path) through this function."""
    from megatron.core.transformer import attention

    attention.apply_rotary_pos_emb = apply_rotary_pos_emb
