"""vLLM's CPU TP collectives leave shared-memory segments behind when an engine is killed.

At infer TP > 1 the CPU build runs its all-reduce on a /dev/shm segment per TP rank
(`_CPUSHMDistributed`, 4 MiB each), named after the engine's rendezvous file, so names are
unique per engine but nothing removes them when the engine dies by SIGKILL (a killed run, a
dead Ray actor). /dev/shm is memory: a long test session or a crash loop fills it. Their
names do not say who made them, so a segment counts as stale when no live process maps it
and it is older than a start-up takes (a starting engine creates, then maps, its own).
"""

from __future__ import annotations

import fnmatch
import os
import time

from mindrl.shared_memory import SHM_DIR

SEGMENTS = "vllm_dist_*cpushm*"


def tp_collectives_use_segments() -> bool:
    """Whether this machine's vLLM CPU build runs TP collectives on these segments: only the
    AVX-512 kernels carry `init_shm_manager`; the AVX2 build (`vllm._C_AVX2`) falls back to
    torch.distributed and creates none (docs/platforms.md#cpus-differ). Asked of the kernels
    vLLM itself loads, never of the CPU's name."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    return hasattr(torch.ops._C, "init_shm_manager")


def _maps(pid) -> list:
    """Paths under SHM_DIR that process `pid` has mapped (none if it is gone)."""
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[5:]
                if path and path[0].startswith(SHM_DIR):
                    out.append(path[0].removesuffix(" (deleted)"))
    except OSError:
        pass
    return out


def mapped_files() -> set:
    """Paths of every file some live process on this machine has mapped."""
    return {path for pid in filter(str.isdigit, os.listdir("/proc")) for path in _maps(pid)}


def sweep_stale_segments(min_age_s: float = 120.0, shm_dir: str = SHM_DIR) -> list:
    """Unlink vLLM CPU-TP segments no live process maps (older than `min_age_s`); the paths
    removed."""
    try:
        names = [n for n in os.listdir(shm_dir) if fnmatch.fnmatch(n, SEGMENTS)]
    except OSError:
        return []
    if not names:
        return []
    in_use, now, removed = mapped_files(), time.time(), []
    for name in names:
        path = os.path.join(shm_dir, name)
        try:
            if path in in_use or now - os.stat(path).st_mtime < min_age_s:
                continue
            os.unlink(path)
            removed.append(path)
        except OSError:
            continue
    return removed


def child_segments() -> list:
    """The TP segments this process's descendants (an engine's vLLM workers) map: what the
    engine removes when it closes. vLLM's workers leave them behind at shutdown, and the
    sweep at the next start only takes segments older than its grace period."""
    import psutil

    return sorted({path for child in psutil.Process().children(recursive=True)
                   for path in _maps(child.pid)
                   if fnmatch.fnmatch(os.path.basename(path), SEGMENTS)})


def remove_segments(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
