"""Pieces of the converter on their own: in-place fill views, the streaming safetensors writer,
and the pread reader."""

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open

from mindrl.ckpt import hf_io, mapping
from mindrl.config.model_spec import load_model_spec


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_part_views_build_what_hf_to_mcore_builds(groups):
    spec = dataclasses.replace(load_model_spec("tiny-qwen2"), num_query_groups=groups,
                               vocab_size=126, make_vocab_size_divisible_by=4)
    gen = torch.Generator().manual_seed(groups)
    for rule, layer in mapping.iter_rules(spec):
        parts = [torch.randn(s, generator=gen) for s in mapping.expected_hf_shapes(rule, spec)]
        want = mapping.hf_to_mcore(rule, parts, spec, spec.padded_vocab_size(1))
        got = torch.full_like(want, float("nan"))
        for view, part in zip(mapping.mcore_part_views(rule, got, spec), parts):
            view.copy_(part.view(view.shape))
        if rule.vocab:
            got[spec.vocab_size:].zero_()
        assert torch.equal(got, want), rule.mcore_name(layer)


def test_streaming_writer_matches_safetensors(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {"a.weight": torch.randn(7, 5, generator=gen),
               "b.bias": torch.randn(3, generator=gen).to(torch.bfloat16),
               "c.weight": torch.randn(40, 10, generator=gen).to(torch.float16),
               "d.empty": torch.zeros(0, 4)}
    entries = [(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    writer = hf_io.ShardedSafetensorsWriter(tmp_path, entries, max_shard_bytes=200)
    for k, v in tensors.items():
        writer.write(k, v)
    written = writer.finish()
    assert len(written) == 4  # three shards + index
    index = json.loads((tmp_path / hf_io.SAFE_INDEX).read_text())
    assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size()
                                                  for v in tensors.values())
    for name, tensor in tensors.items():
        with safe_open(str(tmp_path / index["weight_map"][name]), "pt") as f:
            assert f.metadata() == {"format": "pt"}
            back = f.get_tensor(name)
        assert back.dtype == tensor.dtype and torch.equal(back, tensor)
    with hf_io.HFWeights.open(tmp_path) as weights:  # and our own reader, through the index
        for name, tensor in tensors.items():
            assert torch.equal(weights.get(name), tensor)


def test_writer_refuses_out_of_plan_tensors(tmp_path):
    writer = hf_io.ShardedSafetensorsWriter(tmp_path, [("x", (2,), torch.float32)], 1 << 20)
    with pytest.raises(RuntimeError, match="expected x"):
        writer.write("x", torch.zeros(3))
    with pytest.raises(RuntimeError, match="ended before tensor 'x'"):
        writer.finish()
    writer.abort()


def test_read_into_casts_and_reshapes(tmp_path):
    from safetensors.torch import save_file

    q = torch.randn(8, 4)
    save_file({"q": q}, tmp_path / "model.safetensors")
    with hf_io.HFWeights.open(tmp_path) as weights:
        direct = torch.empty(8, 4)
        weights.read_into("q", direct)
        assert torch.equal(direct, q)
        strided = torch.zeros(2, 6, 4)[:, :4]  # like a q view inside a fused qkv
        weights.read_into("q", strided)
        assert torch.equal(strided.reshape(8, 4), q)
        half = torch.empty(8, 4, dtype=torch.bfloat16)
        weights.read_into("q", half)
        assert torch.equal(half, q.to(torch.bfloat16))


@pytest.mark.parametrize("text,value", [("5GB", 5 * 10**9), ("2GiB", 2 * 2**30), ("300KB", 300_000),
                                        ("1024", 1024)])
def test_parse_size(text, value):
    assert hf_io.parse_size(text) == value
    with pytest.raises(ValueError):
        hf_io.parse_size("lots")
