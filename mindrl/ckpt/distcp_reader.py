"""Reading a torch_dist checkpoint's tensors straight into caller buffers (mcore -> HF).

``dist_checkpointing.load`` unpickles every record into fresh memory and then copies it into
place; for a converter that streams layer by layer, DistcpReader reads each record's small
header and then the tensor bytes directly (pread) into the destination, for chunks saved at
any TP/PP. ``box_pieces`` says instead where a box's bytes lie in the files, for copying them
from file to file without reading them into memory (copy_plan). Missing, truncated or
incomplete data raise McoreCheckpointError naming the file and tensor.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from mindrl.ckpt import fastio
from mindrl.ckpt.mcore_io import VOCAB_KEYS, McoreCheckpointError


class _FileSlice(io.RawIOBase):
    """A read-only file view of bytes [offset, offset + length) of an open fd (pread)."""

    def __init__(self, fd: int, offset: int, length: int):
        super().__init__()
        self._fd, self._offset, self._length, self._pos = fd, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._length}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf) -> int:
        n = max(0, min(len(buf), self._length - self._pos))
        if n == 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buf)[:n]], self._offset + self._pos)
        self._pos += got
        return got


def _pread(fd: int, offset: int, out: torch.Tensor, where: str) -> None:
    try:
        fastio.pread_into(fd, offset, out, where)
    except EOFError as e:
        raise McoreCheckpointError(str(e)) from None


class DistcpReader:
    """Reads boxes of a torch_dist checkpoint's tensors straight into the caller's buffers.

    The files are what DCP's FileSystemReader reads (its .metadata says where each saved
    chunk's torch.save record lies); a record's small pickle is read for the tensor's exact
    layout (torch.load onto the meta device) and its data is then pread into place, where
    the generic loader unpickles every record into fresh memory, copies it into the target
    and runs collectives even in a world of one. For streaming readers (mcore -> HF).
    """

    def __init__(self, ckpt_dir):
        from mindrl.ckpt.safe_metadata import UnsafeMetadataError, load_metadata

        self.directory = Path(ckpt_dir)
        try:
            self.metadata = load_metadata(self.directory / ".metadata")
        except UnsafeMetadataError as e:
            raise McoreCheckpointError(str(e)) from None
        except Exception as e:
            raise McoreCheckpointError(f"{self.directory / '.metadata'}: unreadable "
                                       f"({e})") from e
        self._fds: Dict[str, int] = {}
        self._records: Dict[Tuple[str, Tuple[int, ...]], Tuple] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "DistcpReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _record(self, key: str, offsets) -> Tuple[int, int, torch.Tensor, str]:
        """(fd, file offset of the data, meta tensor with the saved layout, file name), read
        once per record (q, k and v are each several boxes of one record)."""
        found = self._records.get((key, tuple(offsets)))
        if found is None:
            found = self._records[(key, tuple(offsets))] = self._read_record(key, offsets)
        return found

    def _read_record(self, key: str, offsets) -> Tuple[int, int, torch.Tensor, str]:
        from torch.distributed.checkpoint.metadata import MetadataIndex

        info = self.metadata.storage_data[MetadataIndex(key, torch.Size(offsets))]
        where = f"{self.directory / info.relative_path} ({key} at {tuple(offsets)})"
        if getattr(info, "transform_descriptors", None):
            raise McoreCheckpointError(f"{where}: stored with transforms "
                                       f"{info.transform_descriptors}, not supported")
        fd = self._fds.get(info.relative_path)
        if fd is None:
            fd = self._fds[info.relative_path] = os.open(self.directory / info.relative_path,
                                                         os.O_RDONLY)
        try:
            record = io.BufferedReader(_FileSlice(fd, info.offset, info.length))
            meta = torch.load(record, map_location="meta", weights_only=True)
            start = meta.untyped_storage()._checkpoint_offset
        except Exception as e:
            raise McoreCheckpointError(f"{where}: unreadable record ({e})") from e
        if not isinstance(meta, torch.Tensor) or start is None:
            raise McoreCheckpointError(f"{where}: not a tensor record")
        if start + meta.untyped_storage().nbytes() > info.length:
            raise McoreCheckpointError(f"{where}: record shorter than its tensor")
        return fd, info.offset + start, meta, where

    def _tensor_metadata(self, key: str):
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        md = self.metadata.state_dict_metadata.get(key)
        if not isinstance(md, TensorStorageMetadata):
            raise McoreCheckpointError(f"{self.directory}: tensor {key!r} is not in the "
                                       f"checkpoint")
        return md

    def _overlaps(self, key: str, offsets, shape):
        """(chunk, lo, hi) for each saved chunk of ``key`` overlapping the box, [lo, hi) in
        global coordinates, with the chunk's record (fd, data offset, meta, where)."""
        for chunk in self._tensor_metadata(key).chunks:
            lo = [max(a, b) for a, b in zip(offsets, chunk.offsets)]
            hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, shape, chunk.offsets,
                                                          chunk.sizes)]
            if any(h <= low for low, h in zip(lo, hi)):
                continue
            record = self._record(key, chunk.offsets)
            if tuple(record[2].shape) != tuple(chunk.sizes):
                raise McoreCheckpointError(f"{record[3]}: record shape "
                                           f"{tuple(record[2].shape)}, metadata says "
                                           f"{tuple(chunk.sizes)}")
            yield chunk, lo, hi, record

    def read_box(self, key: str, offsets, out: torch.Tensor) -> None:
        """Fill ``out`` with the global tensor ``key``'s box at ``offsets`` of out's shape,
        from however many saved chunks (any TP/PP the checkpoint was saved at) cover it."""
        offsets = tuple(int(o) for o in offsets)
        covered = 0
        for chunk, lo, hi, (fd, start, meta, where) in self._overlaps(key, offsets, out.shape):
            dst = out[tuple(slice(low - o, h - o) for low, h, o in zip(lo, hi, offsets))]
            if (_plain(meta) and meta.dtype == out.dtype and dst.is_contiguous() and
                    tuple(dst.shape) == tuple(chunk.sizes)):
                _pread(fd, start, dst, where)  # the common case: no temporary
            else:
                raw = torch.empty(meta.untyped_storage().nbytes(), dtype=torch.uint8)
                _pread(fd, start, raw, where)
                src = torch.as_strided(raw.view(meta.dtype), meta.shape, meta.stride(),
                                       meta.storage_offset())
                dst.copy_(src[tuple(slice(low - c, h - c)
                                    for low, h, c in zip(lo, hi, chunk.offsets))])
            covered += _numel(h - low for low, h in zip(lo, hi))
        want = out.numel()
        if covered != want:
            raise McoreCheckpointError(f"{self.directory}: the saved chunks of {key!r} cover "
                                       f"{covered} of the {want} values at {offsets} "
                                       f"(incomplete or overlapping checkpoint)")

    def box_pieces(self, key: str, offsets, shape, dtype: torch.dtype
                   ) -> Optional[List[fastio.FileBytes]]:
        """The box's bytes as file ranges in row-major order, for copying them as they are:
        when the saved chunks hold the box in ``dtype``, each its part as one contiguous run
        that follows the previous part's (a TP1 save; TP splits of the first dimension).
        None otherwise: read_box then gathers the box (and reports what is wrong)."""
        offsets, shape = tuple(int(o) for o in offsets), tuple(int(n) for n in shape)
        if self._tensor_metadata(key).properties.dtype != dtype:
            return None
        parts = []
        for chunk, lo, hi, (fd, start, meta, where) in self._overlaps(key, offsets, shape):
            in_chunk = _span(chunk.sizes, [low - c for low, c in zip(lo, chunk.offsets)],
                             [h - c for h, c in zip(hi, chunk.offsets)])
            in_box = _span(shape, [low - o for low, o in zip(lo, offsets)],
                           [h - o for h, o in zip(hi, offsets)])
            if not _plain(meta) or in_chunk is None or in_box is None:
                return None
            size = meta.element_size()
            parts.append((in_box, fastio.FileBytes(fd, start + in_chunk[0] * size,
                                                   in_chunk[1] * size, where)))
        parts.sort(key=lambda part: part[0])
        at = 0
        for (first, count), _ in parts:
            if first != at:
                return None  # a gap or an overlap: let read_box report it
            at += count
        return [piece for _, piece in parts] if at == _numel(shape) else None


def _plain(meta: torch.Tensor) -> bool:
    """The record's tensor is its whole storage, contiguous: its bytes are the values."""
    return (meta.is_contiguous() and meta.storage_offset() == 0 and
            meta.untyped_storage().nbytes() == meta.numel() * meta.element_size())


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _span(sizes, lo, hi) -> Optional[Tuple[int, int]]:
    """(first element, count) of the region [lo, hi) of a row-major array of ``sizes`` when
    the region is one contiguous run of elements; None when it is not."""
    extent = [h - low for low, h in zip(lo, hi)]
    outer = next((i for i, e in enumerate(extent) if e != 1), len(extent))
    if any(lo[j] != 0 or hi[j] != sizes[j] for j in range(outer + 1, len(sizes))):
        return None
    first, stride = 0, 1
    for j in reversed(range(len(sizes))):
        first += lo[j] * stride
        stride *= int(sizes[j])
    return first, _numel(extent)


def entry_layout(sh):
    """(local shape, dtype, build): build(buffer) gives the ShardedTensors that fill a buffer
    of the entry's local shape, each a view of it."""
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

    if isinstance(sh, ShardedTensorFactory):
        # e.g. linear_fc1, saved as [gate; up] halves: read them straight into their places
        # in one buffer.
        return sh.data.shape, sh.data.dtype, lambda buffer: dataclasses.replace(
            sh, data=buffer).build()
    if isinstance(sh, ShardedTensor):
        return tuple(sh.local_shape), sh.dtype, lambda buffer: [
            dataclasses.replace(sh, data=buffer)]
    raise McoreCheckpointError(f"cannot read {type(sh).__name__} entries")


RowBox = Tuple[int, int, str, Tuple[int, ...], int]


def row_boxes(entry) -> Optional[List[RowBox]]:
    """What a sharded entry's local tensor is made of, as blocks of its rows:
    (first local row, rows, checkpoint key, global offsets of the first row, the key's axis
    for local rows). None when a part is not such a block (then only read_tensors reads it).
    """
    shape, dtype, build = entry_layout(entry)
    row = _numel(shape[1:]) if shape else 0
    if not row:
        return None
    boxes = []
    for part in build(torch.empty(shape, dtype=dtype, device="meta")):
        data = part.data
        if (getattr(part, "flattened_range", None) is not None or not data.is_contiguous() or
                tuple(data.shape[1:]) != tuple(shape[1:]) or data.storage_offset() % row):
            return None
        boxes.append((data.storage_offset() // row, data.shape[0], part.key,
                      tuple(part.global_offset), part.prepend_axis_num))
    return sorted(boxes)


def read_tensors(entries: Dict, reader: DistcpReader, saved_shapes: Dict[str, Tuple],
                 arena: Optional["fastio.Arena"] = None) -> Dict[str, torch.Tensor]:
    """Read some of a model's sharded entries into fresh buffers (not the model's memory).

    For streaming readers (mcore -> HF): pass one layer's entries at a time and drop the
    result before the next call; with an ``arena`` the buffers are carved from it (it is
    reset here, so earlier results are overwritten). Vocab-row tensors saved with other
    padding get the rows they share and zeros beyond.
    """
    plans = {name: entry_layout(sh) for name, sh in entries.items()}
    if arena is not None:
        arena.reset()
        arena.reserve(sum(fastio.nbytes(shape, dtype) + 64
                          for shape, dtype, _ in plans.values()))
    out = {}
    for name, (shape, dtype, build) in plans.items():
        buffer = arena.take(shape, dtype) if arena is not None else torch.empty(shape,
                                                                                dtype=dtype)
        for part in build(buffer):
            if getattr(part, "flattened_range", None) is not None:
                raise McoreCheckpointError(f"{part.key}: flattened shards are not supported")
            box = part.data.view((1,) * part.prepend_axis_num + tuple(part.local_shape))
            offsets = tuple(part.global_offset)
            axis = part.prepend_axis_num
            if part.key in VOCAB_KEYS and part.key in saved_shapes:
                saved_rows = saved_shapes[part.key][0][axis]
                rows = max(0, min(box.shape[axis], saved_rows - offsets[axis]))
                box.narrow(axis, rows, box.shape[axis] - rows).zero_()
                box = box.narrow(axis, 0, rows)
            if box.numel():
                reader.read_box(part.key, offsets, box)
        out[name] = buffer
    return out
