"""The file-to-file copy path of the converter on its own: DirectWriter (O_DIRECT ring, and
its buffered fallbacks give the same bytes), records written around skip_data holes, and the
copy plans that say which input bytes make each output tensor."""

import dataclasses
import errno
import io
import os

import pytest
import torch
from safetensors.torch import save_file

from mindrl.ckpt import copy_plan, distcp_reader, distcp_writer, fastio, hf_io, mapping
from mindrl.config.model_spec import load_model_spec


@pytest.fixture
def small_ring(monkeypatch):
    """A ring of 8 KiB buffers, so that a few KiB cross buffer and block boundaries."""
    monkeypatch.setattr(fastio.DirectWriter, "CHUNK", 8192)


@pytest.fixture
def source(tmp_path):
    data = os.urandom(50_000)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def _write(path, fd, direct=True):
    """Memory bytes, file ranges and zeros, across several ring buffers; a ragged end."""
    with fastio.DirectWriter(path, direct=direct) as out:
        out.write(b"head")
        out.write_pieces([fastio.FileBytes(fd, 100, 20_000, "src"), fastio.Zeros(9000),
                          fastio.FileBytes(fd, 7, 3, "src")])
        out.write(memoryview(bytearray(b"x" * 10_001)))
        assert out.tell() == 4 + 20_000 + 9000 + 3 + 10_001
    return path.read_bytes()


def _expected(data):
    return b"head" + data[100:20_100] + bytes(9000) + data[7:10] + b"x" * 10_001


@pytest.mark.parametrize("direct", [True, False])
def test_direct_writer_writes_exactly_the_bytes(tmp_path, source, small_ring, direct):
    fd, data = source
    assert _write(tmp_path / "out.bin", fd, direct) == _expected(data)


def test_direct_writer_falls_back_when_o_direct_cannot_open(tmp_path, source, small_ring,
                                                             monkeypatch):
    """A filesystem without O_DIRECT (EINVAL at open) gets plain writes, same bytes."""
    fd, data = source
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, *args)

    monkeypatch.setattr(fastio.os, "open", no_direct)
    assert _write(tmp_path / "out.bin", fd) == _expected(data)


def test_direct_writer_falls_back_when_o_direct_writes_fail(tmp_path, source, small_ring,
                                                            monkeypatch):
    """A device wanting larger blocks (EINVAL on the first O_DIRECT write): the writer drops
    O_DIRECT and writes the same bytes."""
    fd, data = source
    real_pwrite = os.pwrite
    refused = []

    def picky(out_fd, view, offset):
        if fastio.fcntl.fcntl(out_fd, fastio.fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "misaligned")
        return real_pwrite(out_fd, view, offset)

    monkeypatch.setattr(fastio.os, "pwrite", picky)
    assert _write(tmp_path / "out.bin", fd) == _expected(data)
    assert refused == [0]


def test_direct_writer_reports_a_failed_write(tmp_path, source, small_ring, monkeypatch):
    fd, _ = source

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fastio.os, "pwrite", full)
    with pytest.raises(OSError, match="write failed.*No space left"):
        _write(tmp_path / "out.bin", fd)


def test_direct_writer_names_a_truncated_source(tmp_path, source):
    fd, data = source
    with pytest.raises(EOFError, match="src: ends early"):
        with fastio.DirectWriter(tmp_path / "out.bin") as out:
            out.write_pieces([fastio.FileBytes(fd, len(data) - 10, 20, "src")])


def test_slice_pieces():
    pieces = [fastio.FileBytes(3, 100, 10, "a"), fastio.Zeros(5), fastio.FileBytes(3, 0, 10, "b")]
    assert fastio.slice_pieces(pieces, 8, 17) == [fastio.FileBytes(3, 108, 2, "a"),
                                                  fastio.Zeros(5), fastio.FileBytes(3, 0, 2, "b")]
    assert fastio.slice_pieces(pieces, 0, 0) == []
    with pytest.raises(ValueError, match="run past"):
        fastio.slice_pieces(pieces, 20, 26)


# ------------------------------------------------------------------ records around holes

@dataclasses.dataclass
class _Item:  # what _write_record reads of a DCP WriteItem
    index: str


@pytest.mark.parametrize("shape,dtype", [((40, 17), torch.float32), ((7,), torch.bfloat16),
                                         ((0, 4), torch.float32)])
def test_record_from_pieces_is_torch_saves_record(tmp_path, small_ring, shape, dtype):
    """A record written around a skip_data hole filled from a file is byte for byte the
    record torch.save writes for the tensor (crc32 off, as the converter saves), and loads
    back bit-identical with weights_only=True."""
    tensor = torch.randn(shape).to(dtype)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(b"pad" + tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    expected = io.BytesIO()
    with distcp_writer.torch_save_crc32(False):
        torch.save(tensor, expected)
        fd = os.open(raw, os.O_RDONLY)
        try:
            with fastio.DirectWriter(tmp_path / "rec.bin") as out:
                out.write(b"before")  # a record starts anywhere in the file
                result = distcp_writer._write_record(
                    out, tensor, [fastio.FileBytes(fd, 3, tensor.nbytes, "raw")], _Item("t"),
                    "rec.bin")
        finally:
            os.close(fd)
    written = (tmp_path / "rec.bin").read_bytes()
    info = result.storage_data
    assert (info.relative_path, info.offset) == ("rec.bin", 6)
    assert info.length == len(expected.getvalue())
    assert written[6:] == expected.getvalue()
    back = torch.load(io.BytesIO(written[6:]), weights_only=True)
    assert back.dtype == dtype and torch.equal(back, tensor)


def test_record_refuses_a_hole_of_another_size(tmp_path):
    tensor = torch.zeros(4)
    with distcp_writer.torch_save_crc32(False), pytest.raises(RuntimeError,
                                                              match="8 bytes of pieces"):
        with fastio.DirectWriter(tmp_path / "rec.bin") as out:
            distcp_writer._write_record(out, tensor, [fastio.Zeros(8)], _Item("t"), "rec.bin")


# ------------------------------------------------------------------ copy plans

def _spec(groups):
    return dataclasses.replace(load_model_spec("tiny-qwen2"), num_query_groups=groups,
                               vocab_size=126, make_vocab_size_divisible_by=4)


def _read_pieces(pieces) -> bytes:
    out = bytearray()
    for piece in pieces:
        out += os.pread(piece.fd, piece.nbytes, piece.offset) if isinstance(
            piece, fastio.FileBytes) else bytes(piece.nbytes)
    return bytes(out)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_mcore_pieces_build_what_hf_to_mcore_builds(tmp_path, groups):
    spec = _spec(groups)
    gen = torch.Generator().manual_seed(groups)
    hf = {}
    for rule, layer in mapping.iter_rules(spec):
        for name, shape in zip(rule.hf_names(layer), mapping.expected_hf_shapes(rule, spec)):
            hf[name] = torch.randn(shape, generator=gen)
    save_file(hf, tmp_path / "model.safetensors")
    padded = spec.padded_vocab_size(1)
    with hf_io.HFWeights.open(tmp_path) as weights:
        for rule, layer in mapping.iter_rules(spec):
            want = mapping.hf_to_mcore(rule, [hf[n] for n in rule.hf_names(layer)], spec,
                                       padded)
            pieces = copy_plan.mcore_pieces(rule, layer, spec, tuple(want.shape), want.dtype,
                                            weights)
            got = _read_pieces(pieces)
            assert got == want.reshape(-1).view(torch.uint8).numpy().tobytes(), \
                rule.mcore_name(layer)
            # another dtype must be computed: no pieces
            assert copy_plan.mcore_pieces(rule, layer, spec, tuple(want.shape), torch.bfloat16,
                                          weights) is None


def test_qkv_of_two_groups_is_six_runs():
    spec = _spec(2)
    qkv = next(r for r, _ in mapping.iter_rules(spec) if r.fuse == mapping.FUSE_QKV)
    d, q_rows = spec.head_dim, spec.num_attention_heads // 2 * spec.head_dim
    runs = copy_plan.row_runs(qkv, spec, 2 * (q_rows + 2 * d))
    assert [(part, rows) for _, part, _, rows in runs] == [(0, q_rows), (1, d), (2, d)] * 2


def test_box_pieces_of_a_dcp_checkpoint(tmp_path):
    """Boxes of a saved tensor are file ranges where they are contiguous in its record, and
    None (gathered by read_box) where they are not or the dtype differs."""
    import torch.distributed.checkpoint as dcp

    t = torch.randn(6, 5, 4)
    # One rank, whether or not an earlier test in this process left a process group.
    dcp.save({"t": t}, checkpoint_id=str(tmp_path), no_dist=True)
    flat = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    with distcp_reader.DistcpReader(tmp_path) as reader:
        rows = reader.box_pieces("t", (2, 0, 0), (3, 5, 4), torch.float32)
        assert _read_pieces(rows) == flat[2 * 80:5 * 80]
        inner = reader.box_pieces("t", (1, 2, 0), (1, 2, 4), torch.float32)
        assert _read_pieces(inner) == t[1, 2:4].numpy().tobytes()
        assert reader.box_pieces("t", (0, 0, 0), (2, 2, 4), torch.float32) is None
        assert reader.box_pieces("t", (0, 0, 0), (6, 5, 4), torch.bfloat16) is None
        out = torch.empty(2, 2, 4)
        reader.read_box("t", (0, 0, 0), out)
        assert torch.equal(out, t[:2, :2])


def test_safetensors_written_from_pieces_is_the_same_file(tmp_path):
    tensors = {"a": torch.randn(5, 3), "b": torch.randn(4)}
    entries = [(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    raw = tmp_path / "raw.bin"
    raw.write_bytes(b"".join(v.numpy().tobytes() for v in tensors.values()))
    (tmp_path / "mem").mkdir()
    (tmp_path / "copy").mkdir()
    from_memory = hf_io.ShardedSafetensorsWriter(tmp_path / "mem", entries, 1 << 20)
    for k, v in tensors.items():
        from_memory.write(k, v)
    from_memory.finish()
    fd = os.open(raw, os.O_RDONLY)
    try:
        copied = hf_io.ShardedSafetensorsWriter(tmp_path / "copy", entries, 1 << 20)
        with pytest.raises(RuntimeError, match="expected 60 bytes for a, got 56"):
            copied.write_pieces("a", [fastio.FileBytes(fd, 0, 56, "raw")])
        copied.write_pieces("a", [fastio.FileBytes(fd, 0, 60, "raw")])
        copied.write_pieces("b", [fastio.FileBytes(fd, 60, 16, "raw")])
        copied.finish()
    finally:
        os.close(fd)
    for name in ("model-00001-of-00001.safetensors", hf_io.SAFE_INDEX):
        assert (tmp_path / "copy" / name).read_bytes() == (tmp_path / "mem" / name).read_bytes()
