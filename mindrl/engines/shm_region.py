"""Shared-memory pieces of the same-node weight sync: a /dev/shm file mapped as a tensor by
every process that opens it, an id that tells whether two processes share a machine, and a
sweep of files left behind by killed processes."""

from __future__ import annotations

import os
import socket
import weakref
import zlib

import torch

from mindrl.processes import pid_alive

SHM_DIR = "/dev/shm"


def node_id() -> int:
    """Same value in processes of one machine (one boot), different across machines."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return zlib.crc32(f"{socket.gethostname()}/{boot}".encode())


class SharedRegion:
    """A file in /dev/shm mapped as a flat tensor; the creator unlinks it when dropped."""

    def __init__(self, path: str, numel: int, dtype: torch.dtype, create: bool, seq: int = 0):
        if create:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, numel * torch.empty((), dtype=dtype).element_size())
            finally:
                os.close(fd)
            self._finalizer = weakref.finalize(self, _unlink_quietly, path)
        self.path, self.numel, self.dtype, self.seq = path, numel, dtype, seq
        self.tensor = torch.from_file(path, shared=True, size=numel, dtype=dtype)


def sweep_stale(prefix: str) -> None:
    """Unlink ``SHM_DIR/<prefix>-<pid>[-...]`` files whose creating process is gone: a SIGKILL
    skips the creator's unlink, and /dev/shm is memory (vLLM's shared weights: the model's
    size)."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix + "-"):
            continue
        pid = name[len(prefix) + 1:].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            _unlink_quietly(os.path.join(SHM_DIR, name))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
