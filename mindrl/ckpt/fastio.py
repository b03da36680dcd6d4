"""Streaming file I/O shared by the checkpoint readers and writers.

Moving a checkpoint is bandwidth-bound; what costs beyond the copy itself is fresh memory. A
page fault per 4 KiB of fresh anonymous memory costs about as much as copying the page, and
a buffered write of N bytes allocates N bytes of fresh page cache (0.6-5 s of kernel time for
2 GB on the dev VM) before fsync waits for the disk anyway. So:

- ``DirectWriter`` writes a file through a small ring of reused buffers, with O_DIRECT from a
  background thread: no page cache, and the disk writes while the caller reads the next
  bytes. Output that is a plain copy of input (``FileBytes``) is read straight into the ring.
- ``Arena`` reuses one buffer for tensors that must be computed (cast, strided copies).
- ``pread_into`` reads file bytes straight into a tensor.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

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


def _pread_fully(fd: int, offset: int, view: memoryview, what: str) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise EOFError(f"{what}: ends early (file truncated while reading?)")
        done += got


def pread_into(fd: int, offset: int, out: torch.Tensor, what: str) -> None:
    """Fill a contiguous tensor with the file's bytes at ``offset`` (no temporary)."""
    if out.numel():
        _pread_fully(fd, offset, memoryview(out.detach().reshape(-1).view(torch.uint8).numpy()),
                     what)


# ------------------------------------------------------------------ output as pieces

@dataclass(frozen=True)
class FileBytes:
    """``nbytes`` bytes of an open file at ``offset``: output that is a plain copy of input."""

    fd: int
    offset: int
    nbytes: int
    what: str  # names the source in errors

    def part(self, start: int, size: int) -> "FileBytes":
        return FileBytes(self.fd, self.offset + start, size, self.what)


@dataclass(frozen=True)
class Zeros:
    """``nbytes`` zero bytes (vocab padding rows)."""

    nbytes: int

    def part(self, start: int, size: int) -> "Zeros":
        return Zeros(size)


Piece = Union[FileBytes, Zeros]


def pieces_nbytes(pieces: Sequence[Piece]) -> int:
    return sum(p.nbytes for p in pieces)


def slice_pieces(pieces: Sequence[Piece], start: int, end: int) -> List[Piece]:
    """Bytes [start, end) of the concatenation of ``pieces``, as pieces."""
    out: List[Piece] = []
    pos = 0
    for piece in pieces:
        lo, hi = max(start, pos), min(end, pos + piece.nbytes)
        if lo < hi:
            out.append(piece.part(lo - pos, hi - lo))
        pos += piece.nbytes
    if pos < end:
        raise ValueError(f"bytes [{start}, {end}) run past the {pos} bytes described")
    return out


# ------------------------------------------------------------------ writing

def _open_direct(path, direct: bool) -> int:
    """Open for writing, with O_DIRECT where asked and the filesystem takes it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o666)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
    return os.open(path, flags, 0o666)


def _sync_file_range():
    """Linux sync_file_range (start writeback of a range, asynchronously), or None."""
    try:
        import ctypes
        import sys

        if not sys.platform.startswith("linux"):
            return None
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        return fn
    except (OSError, AttributeError):
        return None


class DirectWriter:
    """A file written sequentially, durably, through a ring of reused buffers that a
    background thread writes out with O_DIRECT (or, where the filesystem refuses O_DIRECT,
    with plain writes handed to writeback as they land), fsynced by finish().

    The caller fills the ring: write() copies bytes from memory, write_pieces() reads file
    ranges straight into it. It is file-like enough for torch.save: write, tell, a no-op
    flush, and seek(n, SEEK_CUR), which writes the pieces announced by fill_hole() (where
    ``torch.serialization.skip_data`` leaves a record's storage bytes out).
    """

    CHUNK = 32 << 20
    DEPTH = 3   # buffers: one being filled, the others being written
    ALIGN = 4096  # O_DIRECT offsets and lengths; every ring buffer starts page-aligned

    def __init__(self, path, direct: bool = True):
        self.path = path
        self._fd = _open_direct(path, direct)
        self._free: "queue.Queue" = queue.Queue()
        for _ in range(self.DEPTH):
            self._free.put(mmap.mmap(-1, self.CHUNK))
        self._todo: "queue.Queue" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._writeback = None if self.direct else _sync_file_range()
        self._thread = threading.Thread(target=self._drain, name="DirectWriter", daemon=True)
        self._thread.start()
        self._buf = self._free.get()
        self._used = 0    # bytes in self._buf
        self._start = 0   # file offset of self._buf
        self._hole: Optional[List[Piece]] = None

    @property
    def direct(self) -> bool:
        return bool(fcntl.fcntl(self._fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))

    # -------------------------------------------------------------- filling the ring

    def tell(self) -> int:
        return self._start + self._used

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            n = min(len(view) - done, self.CHUNK - self._used)
            self._buf[self._used:self._used + n] = view[done:done + n]
            self._advance(n)
            done += n
        return len(view)

    def write_pieces(self, pieces: Sequence[Piece]) -> None:
        for piece in pieces:
            if isinstance(piece, FileBytes):
                self._copy_file(piece)
            else:
                self._zeros(piece.nbytes)

    def _copy_file(self, piece: FileBytes) -> None:
        done = 0
        while done < piece.nbytes:
            n = min(piece.nbytes - done, self.CHUNK - self._used)
            _pread_fully(piece.fd, piece.offset + done,
                         memoryview(self._buf)[self._used:self._used + n], piece.what)
            self._advance(n)
            done += n

    def _zeros(self, size: int) -> None:
        while size:
            n = min(size, self.CHUNK - self._used, 1 << 20)
            self._buf[self._used:self._used + n] = bytes(n)
            self._advance(n)
            size -= n

    def fill_hole(self, pieces: Sequence[Piece]) -> None:
        """The bytes of the next forward seek (see the class docstring)."""
        self._hole = list(pieces)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_CUR or self._hole is None or \
                offset != pieces_nbytes(self._hole):
            raise OSError(errno.ESPIPE, f"{self.path}: written sequentially; only a "
                                        f"fill_hole() hole may be skipped")
        hole, self._hole = self._hole, None
        self.write_pieces(hole)
        return self.tell()

    def hole_filled(self) -> bool:
        """True when no fill_hole() bytes are pending (an empty hole needs no seek)."""
        filled = self._hole is None or not pieces_nbytes(self._hole)
        self._hole = None
        return filled

    def flush(self) -> None:
        """Nothing to do: full buffers are written as they fill, the rest by finish()."""

    def _advance(self, n: int) -> None:
        self._used += n
        if self._used == self.CHUNK:
            self._submit(self.CHUNK)

    def _submit(self, length: int) -> None:
        self._raise_error()
        self._todo.put((self._buf, self._start, length))
        self._start += self._used
        self._used = 0
        self._buf = self._free.get()
        self._raise_error()

    # -------------------------------------------------------------- the writer thread

    def _drain(self) -> None:
        while (job := self._todo.get()) is not None:
            buf, offset, length = job
            try:
                if self._error is None:
                    self._write_out(memoryview(buf)[:length], offset)
            except BaseException as e:  # raised in the caller's thread by _raise_error
                self._error = e
            self._free.put(buf)

    def _write_out(self, view: memoryview, offset: int) -> None:
        done = 0
        while done < len(view):
            try:
                done += os.pwrite(self._fd, view[done:], offset + done)
            except OSError as e:
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                self._drop_direct()  # the device wants a larger alignment: write buffered
        if self._writeback is not None:
            self._writeback(self._fd, offset, len(view), 2)  # SYNC_FILE_RANGE_WRITE

    def _drop_direct(self) -> None:
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        self._writeback = _sync_file_range()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise OSError(f"{self.path}: write failed: {self._error}") from self._error

    # -------------------------------------------------------------- ending

    def finish(self) -> None:
        """Write what is left, wait for the disk (fsync) and close."""
        try:
            size, tail = self.tell(), self._used
            # O_DIRECT writes whole blocks: the last one is padded, then cut back to size.
            padded = -(-tail // self.ALIGN) * self.ALIGN if self.direct else tail
            self._buf[tail:padded] = bytes(padded - tail)
            self._submit(padded)
            self._stop()
            self._raise_error()
            if padded != tail:
                os.ftruncate(self._fd, size)
            os.fsync(self._fd)
        finally:
            self._release()

    def abort(self) -> None:
        """Stop without writing what is queued, and close (the caller removes the file)."""
        if self._error is None:
            self._error = RuntimeError("aborted")  # the thread skips what is left
        self._release()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._todo.put(None)
            self._thread.join()

    def _release(self) -> None:
        self._stop()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DirectWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()
