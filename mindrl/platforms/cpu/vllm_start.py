"""What a vLLM engine process needs on the CPU build before `LLM()` starts
(docs/platforms.md#vllm-on-cpu, docs/platforms.md#the-cluster-path-on-cpu)."""

from __future__ import annotations

import logging
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
    # The CPU worker replaces torch.set_num_threads with a warning, and vLLM's multimodal
    # processing sets threads around every image request: two warnings per image prompt, which
    # buried a run's log (584 lines in 4 steps of the tiny VL recipe). The threads stay as set.
    logging.getLogger("vllm.v1.worker.cpu_worker").addFilter(_not_thread_warning)


def _not_thread_warning(record: logging.LogRecord) -> bool:
    return "torch.set_num_threads" not in record.getMessage()
