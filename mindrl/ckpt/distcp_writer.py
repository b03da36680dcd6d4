"""The torch_dist writer behind save_mcore_checkpoint: Megatron's dist_checkpointing.save with
its files written in this process, one per rank, in state-dict order, durable when done.

Megatron's default writer forks writer processes and reports through a spawned manager
process (seconds of start-up on a CPU host); a sequential in-process write needs none of it.
Each file goes out through a ``fastio.DirectWriter``. A converter that knows where a
parameter's bytes lie in its input files (``pieces``) has them copied from file to file into
the record torch.save writes around them (``skip_data``): the tensor is never in memory.
The output is the same torch_dist checkpoint (DCP metadata + torch.save records), loadable by
``dist_checkpointing.load`` at any TP/PP.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, List, Optional

import torch

from mindrl.ckpt import fastio


Pieces = Callable[[str, torch.Tensor], Optional[List[fastio.Piece]]]


class ParamSource:
    """Turns a tensor the checkpoint planner resolved into bytes the writer may save.

    torch.save writes a tensor's whole storage, so a view (e.g. the gate or up half of
    linear_fc1) is first copied into a tensor of its own, in a reused arena rather than in
    fresh memory. With ``fill``, a view of a parameter is produced by filling the whole
    parameter into the arena (once for all its views) instead of read from the model. With
    ``pieces`` (``pieces(name, param)``: the parameter's bytes as file pieces, or None), a
    contiguous view of a parameter is described by file pieces and never produced at all.
    """

    def __init__(self, model, fill: Optional[Callable[[str, torch.Tensor], None]],
                 pieces: Optional[Pieces] = None):
        self._fill = fill
        self._pieces = pieces
        self._params = {p.untyped_storage().data_ptr(): (name, p)
                        for name, p in model.named_parameters()} if fill is not None else {}
        self._arena = fastio.Arena()      # the parameter being written
        self._scratch_arena = fastio.Arena()  # copies of strided views
        self._current = None  # (storage ptr, filled tensor in the arena)
        self._described = (None, None)  # (parameter name, its pieces): for all its views

    def pieces(self, tensor: torch.Tensor) -> Optional[List[fastio.Piece]]:
        """``tensor``'s bytes as file pieces when it is a contiguous view of a parameter
        that ``pieces`` describes; None when they must be produced (call the source)."""
        found = self._params.get(tensor.untyped_storage().data_ptr())
        if found is None or self._pieces is None or not tensor.is_contiguous():
            return None
        name, param = found
        if self._described[0] != name:
            self._described = (name, self._pieces(name, param))
        whole = self._described[1]
        if whole is None:
            return None
        size = tensor.element_size()
        start = (tensor.storage_offset() - param.storage_offset()) * size
        return fastio.slice_pieces(whole, start, start + tensor.numel() * size)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        if tensor.device.type != "cpu":
            return tensor.cpu()
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in self._params:
            name, param = self._params[ptr]
            if self._current is None or self._current[0] != ptr:
                self._current = None
                self._arena.reset()
                self._arena.reserve(fastio.nbytes(param.shape, param.dtype))
                out = self._arena.take(param.shape, param.dtype)
                with torch.no_grad():
                    self._fill(name, out)
                self._current = (ptr, out)
            filled = self._current[1]
            offset = filled.storage_offset() + tensor.storage_offset() - param.storage_offset()
            tensor = torch.as_strided(filled, tensor.shape, tensor.stride(), offset)
        return _own(tensor, self._scratch)

    def _scratch(self, shape, dtype: torch.dtype) -> torch.Tensor:
        self._scratch_arena.reset()
        self._scratch_arena.reserve(fastio.nbytes(shape, dtype))
        return self._scratch_arena.take(shape, dtype)

    def done(self) -> None:
        self._current = None
        self._described = (None, None)
        self._arena = self._scratch_arena = None


def _own(tensor: torch.Tensor, scratch) -> torch.Tensor:
    """``tensor`` if it is its whole storage, else a copy of it that is."""
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.untyped_storage().nbytes() == nbytes and tensor.storage_offset() == 0 and \
            tensor.is_contiguous():
        return tensor
    if tensor.is_contiguous():  # a contiguous view: wrap its bytes, no copy
        return _wrap_bytes(tensor)
    out = scratch(tensor.shape, tensor.dtype)
    out.copy_(tensor)
    return out


def _wrap_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor sharing a contiguous tensor's memory whose storage is exactly its bytes."""
    if tensor.numel() == 0:
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    flat = tensor.reshape(-1).view(torch.uint8)
    return torch.frombuffer(flat.numpy(), dtype=tensor.dtype).view(tensor.shape)


def save_strategy():
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    return TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1)


_writer_lock = threading.Lock()


@contextlib.contextmanager
def streaming_writer(source: "ParamSource"):
    """Make Megatron's torch_dist save strategy write through ``_StreamingWriter``."""
    from megatron.core.dist_checkpointing.strategies import torch as mcore_torch

    writer_cls = _streaming_writer_class()
    with _writer_lock:
        original = mcore_torch.FileSystemWriterAsync
        mcore_torch.FileSystemWriterAsync = lambda *a, **kw: writer_cls(*a, source=source, **kw)
        try:
            yield
        finally:
            mcore_torch.FileSystemWriterAsync = original
            source.done()


_STREAMING_WRITER = None


def _streaming_writer_class():
    global _STREAMING_WRITER
    if _STREAMING_WRITER is not None:
        return _STREAMING_WRITER
    import functools
    import queue

    from megatron.core.dist_checkpointing.strategies.filesystem_async import (
        FileSystemWriterAsync)
    from torch.distributed.checkpoint.filesystem import (DEFAULT_SUFFIX, SerializationFormat,
                                                         _write_item)
    from torch.distributed.checkpoint.planner import WriteItemType

    class _StreamingWriter(FileSystemWriterAsync):
        """FileSystemWriterAsync that writes in the calling process, one file per rank, items
        in plan (state-dict) order, tensors produced one at a time by a ParamSource."""

        def __init__(self, *args, source: "ParamSource", **kwargs):
            super().__init__(*args, **kwargs)
            self._source = source

        def prepare_write_data(self, plan, planner) -> None:
            name = f"{plan.storage_data.prefix}0{DEFAULT_SUFFIX}"
            bytes_data = [(item, planner.resolve_data(item)) for item in plan.items
                          if item.type == WriteItemType.BYTE_IO]
            tensor_data = [(item, planner.resolve_data(item)) for item in plan.items
                           if item.type != WriteItemType.BYTE_IO]
            self.write_buckets = []
            self.results_queue = None
            if bytes_data or tensor_data:
                self.write_buckets = [(os.path.join(self.checkpoint_dir, name), name,
                                       (bytes_data, tensor_data))]
                self.results_queue = queue.Queue()

        def get_save_function_and_args(self):
            if not self.write_buckets:
                return None, None, []
            return (functools.partial(_write_in_process, self.transforms, self._source),
                    None, [torch.distributed.get_rank(), self.write_buckets,
                           self.results_queue])

    def _write_in_process(transforms, source, rank, buckets, results_queue) -> None:
        from torch.serialization import get_crc32_options

        # A record written around a hole holds no checksum of the bytes put there later.
        holes = not transforms.extensions and not get_crc32_options()
        results = {}
        try:
            for i, (path, key, (bytes_data, tensor_data)) in enumerate(buckets):
                out = []
                with fastio.DirectWriter(path) as stream:
                    for item, data in bytes_data:
                        out.append(_write_item(transforms, stream, data, item, key,
                                               SerializationFormat.TORCH_SAVE))
                    for item, tensor in tensor_data:
                        tensor = tensor.detach()
                        pieces = source.pieces(tensor) if holes else None
                        if pieces is None:
                            out.append(_write_item(transforms, stream, source(tensor), item,
                                                   key, SerializationFormat.TORCH_SAVE))
                        else:
                            out.append(_write_record(stream, tensor, pieces, item, key))
                results[i] = out
        except Exception as e:  # reported by retrieve_write_results, as Megatron does
            results = e
        results_queue.put(results)

    _STREAMING_WRITER = _StreamingWriter
    return _STREAMING_WRITER


def _write_record(stream: fastio.DirectWriter, tensor: torch.Tensor, pieces, item, key: str):
    """What DCP's _write_item writes for a tensor (a torch.save record at the stream's end,
    and its WriteResult), with the storage bytes copied from ``pieces`` into the hole that
    torch.save leaves under skip_data: the same record, the tensor never in memory."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.storage import WriteResult

    size = tensor.numel() * tensor.element_size()
    if fastio.pieces_nbytes(pieces) != size:
        raise RuntimeError(f"{key}: {fastio.pieces_nbytes(pieces)} bytes of pieces for a "
                           f"tensor of {size} bytes {tuple(tensor.shape)}")
    offset = stream.tell()
    stand_in = torch.empty(tensor.shape, dtype=tensor.dtype)  # only its layout is pickled
    stream.fill_hole(pieces)
    with torch.serialization.skip_data():
        torch.save(stand_in, stream)
    if not stream.hole_filled():
        raise RuntimeError(f"{stream.path}: torch.save left no hole for {key} "
                           f"{tuple(tensor.shape)}")
    length = stream.tell() - offset
    return WriteResult(index=item.index, size_in_bytes=length,
                       storage_data=_StorageInfo(key, offset, length))


@contextlib.contextmanager
def torch_save_crc32(enabled: bool):
    from torch import serialization

    before = serialization.get_crc32_options()
    serialization.set_crc32_options(enabled)
    try:
        yield
    finally:
        serialization.set_crc32_options(before)
