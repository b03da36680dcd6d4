"""What a vLLM engine process needs on the CPU build before `LLM()` starts (PLATFORM_NOTES
"vLLM on CPU" and "The cluster path on CPU")."""

from __future__ import annotations

import contextlib
import logging
import os

import torch

from mindrl.platforms.cpu.vllm_shm import sweep_stale_segments

COMPILE_DISABLE = "TORCH_COMPILE_DISABLE"   # torch._dynamo.config.disable's variable


def prepare_vllm_process(threads: int) -> None:
    """Thread settings first (the CPU worker turns `torch.set_num_threads` into a no-op once
    it binds), then the shared-memory segments killed engines left behind, then torch.compile
    off in this process (see `compile_off`)."""
    # vLLM's own binding ("auto") fails at TP > 1 here ("Not enough allowed NUMA nodes").
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(threads)
    sweep_stale_segments()
    # The CPU worker replaces torch.set_num_threads with a warning, and vLLM's multimodal
    # processing sets threads around every image request: two warnings per image prompt, which
    # buried a run's log (584 lines in 4 steps of the tiny VL recipe). The threads stay as set.
    logging.getLogger("vllm.v1.worker.cpu_worker").addFilter(_not_thread_warning)
    compile_off()


def compile_off() -> None:
    """vLLM runs eagerly on CPU (enforce_eager), yet its sampler's log-prob ranks and, at TP >
    1, its vocabulary-parallel embedding mask are `torch.compile`d helpers: the first
    generate traced them and built inductor kernels, hashing torch's sources on the way
    (measured: 1.6 s per TP1 engine, 2.8 s at TP2, ~4 s of CPU per TP worker, more with a cold
    compile cache). Run as plain functions they compute the same integers. Nothing else that
    shares a process with vLLM compiles on CPU (platforms/fused_kernels.py)."""
    import torch._dynamo

    torch._dynamo.config.disable = True


@contextlib.contextmanager
def workers_compile_off():
    """While vLLM spawns its TP workers: they read TORCH_COMPILE_DISABLE when they import
    torch. Restored afterwards, so that processes this one starts later (spawn_local's ranks,
    which may compile) never inherit it."""
    before = os.environ.get(COMPILE_DISABLE)
    os.environ[COMPILE_DISABLE] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(COMPILE_DISABLE, None)
        else:
            os.environ[COMPILE_DISABLE] = before


def _not_thread_warning(record: logging.LogRecord) -> bool:
    return "torch.set_num_threads" not in record.getMessage()
