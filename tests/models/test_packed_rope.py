"""Packed rows' RoPE in one pass (mindrl/models/packed_rope.py) equals Megatron's per-sequence
thd path bit for bit: values and gradients, with per-row and per-token frequencies, and the
row cache never serves another row's cos / sin."""

from types import SimpleNamespace

import pytest
import torch
from megatron.core.models.common.embeddings import rope_utils

from mindrl.models import packed_rope

CONFIG = SimpleNamespace(apply_rope_fusion=False, multi_latent_attention=False,
                         rotary_interleaved=False)
ONE_RANK = SimpleNamespace(size=lambda: 1, rank=lambda: 0)


def _freqs(n: int, dim: int = 16, base: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    f = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    return torch.cat([f, f], -1)[:, None, None, :]            # [n, 1, 1, dim]


def _megatron(t, freqs, cu):
    return rope_utils._apply_rotary_pos_emb_thd(t, cu, freqs, cp_group=ONE_RANK)


def _both(t, freqs, cu, mscale=1.0):
    a = t.clone().requires_grad_(True)
    b = t.clone().requires_grad_(True)
    ours = packed_rope.apply_rotary_pos_emb(a, freqs, CONFIG, cu_seqlens=cu, mscale=mscale,
                                            cp_group=ONE_RANK)
    theirs = rope_utils._apply_rotary_pos_emb_thd(b, cu, freqs, mscale=mscale,
                                                  cp_group=ONE_RANK)
    g = torch.randn_like(ours)
    ours.backward(g)
    theirs.backward(g)
    return ours, theirs, a.grad, b.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_frequencies_match_megatron_bit_for_bit(dtype):
    # three sequences and a padded tail (its own cu_seqlens entry), as data/rows/packed.py
    cu = torch.tensor([0, 5, 6, 13, 16], dtype=torch.int32)
    t = torch.randn(16, 4, 16).to(dtype)
    ours, theirs, ga, gb = _both(t, _freqs(7), cu)
    assert torch.equal(ours, theirs)
    assert torch.equal(ga, gb)
    # a sequence's first token is unrotated (position 0): the positions restart per sequence
    for start in (0, 5, 6, 13):
        assert torch.equal(ours[start], t[start])


def test_per_token_frequencies_match_megatron():
    """M-RoPE's case: the frequencies are already one row per token of the pack."""
    cu = torch.tensor([0, 4, 9, 12], dtype=torch.int32)
    t = torch.randn(12, 2, 16)
    freqs = torch.randn(12, 1, 1, 16)
    ours, theirs, ga, gb = _both(t, freqs, cu, mscale=0.5)
    assert torch.equal(ours, theirs) and torch.equal(ga, gb)


def test_a_partial_rotary_dimension_passes_the_rest_through():
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    t = torch.randn(8, 2, 24)
    ours, theirs, ga, gb = _both(t, _freqs(5, dim=16), cu)
    assert torch.equal(ours, theirs) and torch.equal(ga, gb)
    assert torch.equal(ours[..., 16:], t[..., 16:])


def test_the_row_cache_never_serves_another_row():
    freqs = _freqs(8)
    t = torch.randn(10, 2, 16)
    first = torch.tensor([0, 2, 10], dtype=torch.int32)
    second = torch.tensor([0, 7, 10], dtype=torch.int32)
    for cu in (first, second, first):
        ours = packed_rope.apply_rotary_pos_emb(t, freqs, CONFIG, cu_seqlens=cu,
                                                cp_group=ONE_RANK)
        assert torch.equal(ours, _megatron(t, freqs, cu))
    cu = first.clone()
    packed_rope.apply_rotary_pos_emb(t, freqs, CONFIG, cu_seqlens=cu, cp_group=ONE_RANK)
    cu[1] = 6                                     # the same tensor, changed in place
    ours = packed_rope.apply_rotary_pos_emb(t, freqs, CONFIG, cu_seqlens=cu, cp_group=ONE_RANK)
    assert torch.equal(ours, _megatron(t, freqs, cu))


def test_padded_rows_and_other_layouts_stay_megatrons():
    t = torch.randn(6, 2, 3, 16)                                 # [s, b, heads, d]
    ours = packed_rope.apply_rotary_pos_emb(t, _freqs(6), CONFIG, cp_group=ONE_RANK)
    assert torch.equal(ours, rope_utils._apply_rotary_pos_emb_bshd(t, _freqs(6)))
