"""What a vLLM engine process needs on the CPU build before `LLM()` starts (PLATFORM_NOTES
"vLLM on CPU" and "The cluster path on CPU")."""

from __future__ import annotations

import os

import torch

from mindrl.platforms.cpu.vllm_shm import sweep_stale_segments


def prepare_vllm_process(threads: int) -> None:
    """Thread settings first (the CPU worker turns `torch.set_num_threads` into a no-op once
    it binds), then the shared-memory segments killed engines left behind."""
    # vLLM's own binding ("auto") fails at TP > 1 here ("Not enough allowed NUMA nodes").
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(threads)
    sweep_stale_segments()
