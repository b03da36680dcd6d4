"""Packed attention on CPU: exact causal SDPA per sequence, similar lengths batched."""

import torch

from mindrl.models.sdpa_attention import length_buckets, packed_sdpa


def test_length_buckets_batch_similar_lengths_as_wide_as_their_longest():
    groups = length_buckets([5, 30, 33, 70, 64, 9, 11], bucket=32)
    # 1..32: width 30 (not 32); 33..64: 64; a lone sequence keeps its own length.
    assert groups == {30: [0, 1, 5, 6], 64: [2, 4], 70: [3]}
    assert length_buckets([11, 4, 7, 11]) == {11: [0, 1, 2, 3]}


def test_packed_sdpa_equals_attention_over_each_sequence_alone_forward_and_backward():
    g = torch.Generator().manual_seed(0)
    lengths = [7, 30, 29, 1, 64, 40]
    total, heads, kv_heads, dim = sum(lengths), 4, 2, 8
    q = torch.randn(total, heads, dim, generator=g, requires_grad=True)
    k = torch.randn(total, kv_heads, dim, generator=g, requires_grad=True)
    v = torch.randn(total, kv_heads, dim, generator=g, requires_grad=True)
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    out = packed_sdpa(q, k, v, bounds, scale=0.3)
    expected = []
    for a, b in zip(bounds, bounds[1:]):
        qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))
        ks, vs = ks.repeat_interleave(2, dim=1), vs.repeat_interleave(2, dim=1)
        scores = (qs @ ks.transpose(-1, -2)) * 0.3
        causal = torch.ones(b - a, b - a, dtype=torch.bool).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        expected.append((probs @ vs)[0].transpose(0, 1))
    expected = torch.cat(expected)
    assert (out - expected).abs().max() <= 1e-5
    weights = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    want = torch.autograd.grad((expected * weights).sum(), (q, k, v))
    for got, ref in zip(grads, want):
        assert (got - ref).abs().max() <= 1e-5
