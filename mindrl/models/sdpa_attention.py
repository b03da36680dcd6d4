"""Megatron core attention through torch's scaled_dot_product_attention, padded and packed.

Megatron-core's local DotProductAttention (the only core attention without Transformer
Engine) materialises the [b, heads, s, s] scores, masks, softmaxes and multiplies them in
separate kernels, with copies between: at the 75M bench shape it was 7 s of a 42 s update on
CPU, where SDPA's fused kernel (flash attention on CPU and CUDA) takes about half, with less
memory. Same maths: causal softmax(q k^T * scale) v per query group.

Packed input (Megatron's thd layout: [T, heads, d] with cu_seqlens, data/rows/packed.py),
which the local attention refuses: the device's varlen kernel where it has one for the dtype
(device.varlen_attention), else exact causal SDPA per sequence, sequences of similar length
right-padded to the longest of them and batched into one call (a causal row never attends to
the padding after it, so the real rows are exact; one call per short sequence costs more
than the padding saves).
Cases SDPA does not cover here (an explicit mask with another meaning, attention bias, a
softmax offset, sliding windows, dropout) go to Megatron's own forward.
"""

from __future__ import annotations

from typing import Dict, List

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType

from mindrl import device

# Packed sequences are grouped by their length rounded up to this many tokens.
LENGTH_BUCKET = 32


def _sdpa(q, k, v, scale):
    """Causal SDPA on [b, heads, s, d], grouped KV heads kept as they are."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def length_buckets(lengths: List[int], bucket: int = LENGTH_BUCKET) -> Dict[int, List[int]]:
    """{width: sequence indices}: sequences grouped by their length rounded up to `bucket`,
    each group as wide as its longest member (a lone sequence: its own length). CPU flash
    attention's cost grows with the width: 43 sequences of at most 11 tokens cost 2.2 ms
    forward + backward at width 32 and 0.9 ms at 11; 16 of 259-280 tokens (the 75M bench)
    197 ms at 288 and 177 ms at 280."""
    groups: Dict[int, List[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(-(-n // bucket), []).append(i)
    # The longest member of group g lies in ((g - 1) * bucket, g * bucket]: widths differ.
    return {max(lengths[i] for i in members): members for members in groups.values()}


def packed_sdpa(q, k, v, cu_seqlens: List[int], scale: float) -> torch.Tensor:
    """Causal attention within each sequence of a packed [T, heads, d] row, exact.

    Each length bucket is gathered into [n, heads, width, d] with one index (a row past its
    sequence's end repeats the sequence's last token: causal rows before it never see it) and
    the real rows go back to their places with one more: a few calls per bucket, not a few per
    sequence (128 short sequences cost ~900 calls a layer that way)."""
    starts, lengths = cu_seqlens[:-1], [b - a for a, b in zip(cu_seqlens, cu_seqlens[1:])]
    places, outputs = [], []
    for width, members in length_buckets(lengths).items():
        first = torch.tensor([starts[i] for i in members], device=q.device)
        count = torch.tensor([lengths[i] for i in members], device=q.device)
        offset = torch.arange(width, device=q.device)
        gather = (first[:, None] + torch.minimum(offset[None, :], count[:, None] - 1)).flatten()

        def stacked(t):   # [n, heads, width, d]
            return t.index_select(0, gather).view(len(members), width, *t.shape[1:]
                                                  ).transpose(1, 2)

        out = _sdpa(stacked(q), stacked(k), stacked(v), scale).transpose(1, 2)
        real = (offset[None, :] < count[:, None]).flatten()
        outputs.append(out.reshape(len(members) * width, *q.shape[1:])[real])
        places.append(gather[real])
    # Every row of the pack is in one sequence (a padded tail is its own): a permutation.
    return torch.cat(outputs).index_select(0, torch.argsort(torch.cat(places)))


class SDPAttention(DotProductAttention):
    def _sdpa_applies(self, attention_mask, attn_mask_type, attention_bias) -> bool:
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        return (attention_mask is None and mask_type == AttnMaskType.causal
                and attention_bias is None and self.softmax_offset is None
                and self.scale_mask_softmax.window_size is None
                and not (self.training and self.attention_dropout.p > 0))

    def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None):
        if not self._sdpa_applies(attention_mask, attn_mask_type, attention_bias):
            return super().forward(query, key, value, attention_mask, attn_mask_type,
                                   attention_bias, packed_seq_params)
        if packed_seq_params is not None:
            return self._packed(query, key, value, packed_seq_params)
        # [s, b, heads, d] -> [b, heads, s, d]; key/value keep their query groups (GQA).
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        context = _sdpa(q, k, v, self.softmax_scale)
        # [b, heads, s, d] -> [s, b, heads * d]
        return context.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1],
                                                   self.hidden_size_per_partition)

    def _packed(self, query, key, value, params):
        """[T, heads, d] (Megatron squeezed the batch of 1) -> [T, heads * d]."""
        if params.qkv_format != "thd":
            raise ValueError(f"packed attention takes the thd layout, got {params.qkv_format}")
        varlen = device.varlen_attention(query.dtype)
        if varlen is not None:
            context = varlen(query, key, value, params.cu_seqlens_q, params.max_seqlen_q,
                             self.softmax_scale)
        else:
            bounds = getattr(params, "host_cu_seqlens", None) or params.cu_seqlens_q.tolist()
            context = packed_sdpa(query, key, value, bounds, self.softmax_scale)
        return context.reshape(query.shape[0], self.hidden_size_per_partition)
