"""Streaming file I/O shared by the checkpoint readers and writers.

Moving a checkpoint is bandwidth-bound: what costs beyond the copy itself is touching fresh
memory (a page fault per 4 KiB, about as expensive as copying the page) and, for durable
writes, waiting for the disk at the end. ``Arena`` reuses one buffer for the tensors that
stream through, ``pread_into`` reads file bytes straight into a tensor, ``write_tensor``
writes one from its own memory, and ``WriteBehind`` starts writeback while the file grows so
that the final fsync has little left to wait for.
"""

from __future__ import annotations

import os

import torch


class Arena:
    """One reusable buffer that tensors are carved from, so that streaming code touches the
    same (already mapped) pages again and again instead of faulting in fresh memory for
    every tensor: a fresh buffer costs a page fault per 4 KiB, about as much as the copy."""

    def __init__(self) -> None:
        self._buf = torch.empty(0, dtype=torch.uint8)
        self._used = 0

    def reset(self) -> None:
        self._used = 0

    def reserve(self, nbytes: int) -> None:
        """Grow to at least nbytes (only between uses: tensors taken before are invalid)."""
        if self._buf.numel() < nbytes:
            self._buf = torch.empty(0, dtype=torch.uint8)  # free the old one first
            self._buf = torch.empty(nbytes, dtype=torch.uint8)

    def take(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A tensor of its own storage (exactly its bytes: torch.save writes only them),
        64-byte aligned, in the arena; valid until reset()."""
        size = nbytes(shape, dtype)
        start = -(-self._used // 64) * 64
        if start + size > self._buf.numel():
            raise RuntimeError("arena too small: reserve() the step's bytes first")
        self._used = start + size
        if size == 0:
            return torch.empty(shape, dtype=dtype)
        raw = self._buf.numpy()[start:start + size]
        return torch.frombuffer(raw, dtype=dtype).view(shape)


def nbytes(shape, dtype: torch.dtype) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n * torch.empty((), dtype=dtype).element_size()


def pread_into(fd: int, offset: int, out: torch.Tensor, what: str) -> None:
    """Fill a contiguous tensor with the file's bytes at ``offset`` (no temporary)."""
    size = out.numel() * out.element_size()
    if size == 0:
        return
    view = memoryview(out.detach().reshape(-1).view(torch.uint8).numpy())
    done = 0
    while done < size:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise EOFError(f"{what}: ends early (file truncated while reading?)")
        done += got


WRITE_CHUNK = 16 << 20


def write_all(fd: int, data, behind: "WriteBehind | None" = None, offset: int = 0) -> int:
    """os.write every byte of ``data`` (a bytes-like object) in chunks, telling ``behind``
    (the file then being at ``offset``) as they land; returns the new offset."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:done + WRITE_CHUNK])
        if behind is not None:
            behind.written(offset + done)
    return offset + done


def write_tensor(fd: int, tensor: torch.Tensor, behind: "WriteBehind | None" = None,
                 offset: int = 0) -> int:
    """Write a contiguous tensor's bytes from its own memory; returns the new offset."""
    if tensor.numel():
        return write_all(fd, tensor.detach().reshape(-1).view(torch.uint8).numpy(), behind,
                         offset)
    return offset


class WriteBehind:
    """Durability without a long final fsync: hands written ranges to the kernel's writeback
    as the file grows (Linux sync_file_range, asynchronous), so the disk writes while the
    converter reads and transforms the next tensors; finish() fsyncs what is left."""

    CHUNK = 32 << 20
    _sync_file_range = None

    def __init__(self, fd: int):
        self._fd = fd
        self._started = 0
        cls = type(self)
        if cls._sync_file_range is None:
            cls._sync_file_range = False
            try:
                import ctypes
                import sys

                if sys.platform.startswith("linux"):
                    fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                   ctypes.c_uint]
                    cls._sync_file_range = fn
            except (OSError, AttributeError):
                pass

    def written(self, end: int) -> None:
        if self._sync_file_range and end - self._started >= self.CHUNK:
            self._sync_file_range(self._fd, self._started, end - self._started, 2)
            self._started = end

    def finish(self) -> None:
        os.fsync(self._fd)
