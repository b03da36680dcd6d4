"""Every file MindRL creates in /dev/shm: a region mapped as a tensor by every process that
opens it, the names they take, and one sweep of those whose creator is gone.

/dev/shm is memory, and a process that Ray ends (or SIGKILL) runs no finalizer: a creator
removes its files explicitly at shutdown (`SharedRegion.close`), and every run sweeps, at
start and on each node, the files whose pid is dead (`sweep_stale`). Every name is
``<prefix>-<creator pid>[-<more>]`` with a prefix from `PREFIXES`, so the sweep knows them all.
Torch is imported only by `SharedRegion`: the module is read below every layer.
"""

from __future__ import annotations

import os
import weakref
from typing import Iterable, Optional

from mindrl.processes import pid_alive

SHM_DIR = "/dev/shm"

RESHARD = "mindrl-reshard"              # the shm bucket (weight_sync/shm_bucket.py), host pid
RELAY = "mindrl-relay"                  # a node's relay receiver (weight_sync/node_relay.py)
VLLM_WEIGHTS = "mindrl-vllm-weights"    # vLLM's shared weights (cpu_weights: shared)
VLLM_STAGING = "mindrl-vllm-staging"    # tensors handed to an infer TP > 1 engine
PREFIXES = (RESHARD, RELAY, VLLM_WEIGHTS, VLLM_STAGING)


def shm_path(prefix: str, pid: int, *more) -> str:
    """``SHM_DIR/<prefix>-<pid>[-<more>...]``: the form `sweep_stale` reads the pid from."""
    return os.path.join(SHM_DIR, "-".join([prefix, str(pid), *map(str, more)]))


class SharedRegion:
    """A file in /dev/shm mapped as a flat tensor. Its creator unlinks it at `close` (or, as
    a fallback inside one process, when the region is dropped)."""

    def __init__(self, path: str, numel: int, dtype, create: bool, seq: int = 0):
        import torch

        self._finalizer = None
        if create:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, numel * dtype.itemsize)
            finally:
                os.close(fd)
            self._finalizer = weakref.finalize(self, _unlink_quietly, path)
        self.path, self.numel, self.dtype, self.seq = path, numel, dtype, seq
        self.tensor = torch.from_file(path, shared=True, size=numel, dtype=dtype)

    def close(self) -> None:
        """Unlink the file now (its creator only; mappings elsewhere stay valid until dropped)."""
        if self._finalizer is not None:
            self._finalizer()


def creator_pid(name: str, prefixes: Iterable[str] = PREFIXES) -> Optional[int]:
    """The creator's pid in a ``<prefix>-<pid>[-...]`` file name or path (the first prefix
    that fits); None for a name of another form."""
    name = os.path.basename(name)
    for prefix in prefixes:
        if name.startswith(prefix + "-"):
            pid = name[len(prefix) + 1:].split("-", 1)[0]
            return int(pid) if pid.isdigit() else None
    return None


def sweep_stale(prefixes: Iterable[str] = PREFIXES, shm_dir: str = SHM_DIR) -> list:
    """Unlink ``<prefix>-<pid>[-...]`` files whose creating process is gone; the paths
    removed. Files of live processes, and names of other forms, stay."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    prefixes = tuple(prefixes)
    removed = []
    for name in names:
        pid = creator_pid(name, prefixes)
        if pid is not None and not pid_alive(pid):
            path = os.path.join(shm_dir, name)
            _unlink_quietly(path)
            removed.append(path)
    return removed


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
