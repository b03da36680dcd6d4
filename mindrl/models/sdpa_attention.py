"""Megatron core attention through torch's scaled_dot_product_attention.

Megatron-core's local DotProductAttention (the only core attention without Transformer
Engine) materialises the [b, heads, s, s] scores, masks, softmaxes and multiplies them in
separate kernels, with copies between: at the 75M bench shape it was 7 s of a 42 s update on
CPU, where SDPA's fused kernel (flash attention on CPU and CUDA) takes about half, with less
memory. Same maths: causal softmax(q k^T * scale) v per query group.
Cases SDPA does not cover here (an explicit mask with another meaning, attention bias, a
softmax offset, sliding windows, packed sequences, dropout) go to Megatron's own forward.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType


class SDPAttention(DotProductAttention):
    def _sdpa_applies(self, attention_mask, attn_mask_type, attention_bias,
                      packed_seq_params) -> bool:
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        return (attention_mask is None and mask_type == AttnMaskType.causal
                and attention_bias is None and packed_seq_params is None
                and self.softmax_offset is None
                and self.scale_mask_softmax.window_size is None
                and not (self.training and self.attention_dropout.p > 0))

    def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None):
        if not self._sdpa_applies(attention_mask, attn_mask_type, attention_bias,
                                  packed_seq_params):
            return super().forward(query, key, value, attention_mask, attn_mask_type,
                                   attention_bias, packed_seq_params)
        # [s, b, heads, d] -> [b, heads, s, d]; key/value keep their query groups (GQA).
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        context = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.softmax_scale,
            enable_gqa=q.shape[1] != k.shape[1])
        # [b, heads, s, d] -> [s, b, heads * d]
        return context.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1],
                                                   self.hidden_size_per_partition)
