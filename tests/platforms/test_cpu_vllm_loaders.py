"""Pure pieces of the CPU build's worker-side weight loaders (the loaders themselves run
against a real vLLM in tests/engines/test_vllm_engine.py and tests/weight_sync)."""

import torch

from mindrl.platforms.cpu.vllm_loaders import _copy_rows, _side_by_side


def test_parts_side_by_side_in_one_buffer_become_a_view_of_it():
    buffer = torch.randn(10 * 4)
    q, k, v = buffer[:24].view(6, 4), buffer[24:32].view(2, 4), buffer[32:40].view(2, 4)
    fused = _side_by_side([q, k, v])
    assert torch.equal(fused, torch.cat([q, k, v]))
    assert fused.data_ptr() == buffer.data_ptr()       # no copy: what the oneDNN pack reads


def test_parts_out_of_order_or_apart_are_concatenated():
    buffer = torch.randn(10 * 4)
    q, k = buffer[:24].view(6, 4), buffer[24:32].view(2, 4)
    swapped = _side_by_side([k, q])
    assert torch.equal(swapped, torch.cat([k, q]))
    apart = [torch.randn(3, 4), torch.randn(2, 4)]
    assert torch.equal(_side_by_side(apart), torch.cat(apart))
    gap = [buffer[:8].view(2, 4), buffer[12:20].view(2, 4)]
    assert torch.equal(_side_by_side(gap), torch.cat(gap))


def test_vocab_padding_rows_are_zeroed_like_vllms_loader():
    param = torch.full((6, 3), 7.0)
    src = torch.randn(4, 3)
    _copy_rows(param, src)
    assert torch.equal(param[:4], src) and not param[4:].any()
    norm = torch.zeros(3)
    _copy_rows(norm, torch.ones(3))
    assert torch.equal(norm, torch.ones(3))
