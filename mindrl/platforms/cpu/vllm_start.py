"""What a vLLM engine process needs on the CPU build before `LLM()` starts
(docs/platforms.md#vllm-on-cpu, docs/platforms.md#the-cluster-path-on-cpu)."""

from __future__ import annotations

import gc
import logging
import os

import torch

from mindrl.platforms.cpu.vllm_shm import sweep_stale_segments


def prepare_vllm_process(threads: int) -> None:
    """Thread settings first (the CPU worker turns `torch.set_num_threads` into a no-op once
    it binds), then the shared-memory segments killed engines left behind, then how the
    engine and its tensor-parallel workers wait for each other and how the workers start."""
    # vLLM's own binding ("auto") fails at TP > 1 here ("Not enough allowed NUMA nodes").
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(threads)
    sweep_stale_segments()
    idle_queue_readers_sleep()
    if threads == 1:
        fork_tensor_parallel_workers()
    # The CPU worker replaces torch.set_num_threads with a warning, and vLLM's multimodal
    # processing sets threads around every image request: two warnings per image prompt, which
    # buried a run's log (584 lines in 4 steps of the tiny VL recipe). The threads stay as set.
    logging.getLogger("vllm.v1.worker.cpu_worker").addFilter(_not_thread_warning)


def _not_thread_warning(record: logging.LogRecord) -> bool:
    return "torch.set_num_threads" not in record.getMessage()


def step_on_this_thread() -> None:
    """Give the calling thread the engine's OpenMP thread count before it steps an in-process
    engine (infer TP 1: vLLM runs the model on whichever thread calls it).

    torch's thread count is the process's; OpenMP's is each thread's own, and a thread takes
    torch's only at its first torch parallel op. Until then it has the count the process
    started with (OMP_NUM_THREADS: 1 in every Ray worker, workers/worker_group.WORKER_ENV).
    vLLM's CPU attention reads OpenMP's count twice in a step: building the step's attention
    metadata, which comes before any such op, and in the kernel, after the step's first
    matmul. A thread's first step then failed with `cpu_attn_impl.hpp Check failed:
    input->metadata->thread_num == thread_num (1 vs. 2)` wherever the engine ran more than
    the process's starting count: an engine actor's generate runs on its default
    concurrency group's thread, not the one that started vLLM (rollout/engine_group.py), and
    under rl_config.inflight_sync no weight call ran on that thread before its first
    generate (bench_e2e natural, cpu_threads 2, rollout_devices 1). torch's count is what
    prepare_vllm_process (or vLLM's own binding) set; `torch._C.set_num_threads` is
    torch.set_num_threads itself, which vLLM's CPU worker replaces with a no-op once it
    starts. Cheap: one call per generate."""
    torch._C.set_num_threads(torch.get_num_threads())


def fork_tensor_parallel_workers() -> None:
    """An engine of infer TP > 1 forks its TP workers instead of spawning them.

    vLLM's CPU platform sets `VLLM_WORKER_MULTIPROC_METHOD=spawn` in every config check, and
    vLLM forces spawn inside any Ray actor (a rule written for GPU processes), so each TP
    worker of a Ray engine started a fresh interpreter that imported torch, vLLM and the
    model code again: 16-24 CPU-s per worker, against about 2 forked (the tiny model,
    2026-11-28). Forking is safe because the engine process runs one torch thread: libgomp
    never starts its pool, so no child inherits a pool whose threads are gone (a forked child
    of a process that ran a parallel region hangs); `prepare_vllm_process` calls this only
    then. The TP workers never call Ray. Idempotent: engines in one process wrap it once."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils import system_utils

    check = CpuPlatform.check_and_update_config.__func__
    if getattr(check, "keeps_fork", False):
        return

    def check_keeping_fork(cls, vllm_config) -> None:
        check(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
        # The workers fork after this check: they inherit the engine's heap, imports and all,
        # frozen, so their full collections pass over none of it. Each worker's shutdown runs
        # one: over the whole inherited heap that took past vLLM's 5 s grace (a MoE engine of
        # TP 2, measured), and the executor then kills the workers. In-process engines (TP 1)
        # fork nothing and keep their heap collectable.
        if vllm_config.parallel_config.world_size > 1:
            gc.freeze()

    check_keeping_fork.keeps_fork = True
    CpuPlatform.check_and_update_config = classmethod(check_keeping_fork)
    # `_maybe_force_spawn` asks this to decide; nothing else in vLLM reads system_utils' copy.
    system_utils.is_in_ray_actor = lambda: False


# How long a sleeping queue reader waits before it looks at the queue again when no
# notification came (vLLM's SHM_READER_RECHECK_INTERVAL_MS, 5,000 there).
QUEUE_RECHECK_MS = 10


def idle_queue_readers_sleep() -> None:
    """vLLM's shared-memory queues between an engine and its TP workers keep a reader spinning
    on sched_yield for 1 s after each message before it sleeps on the writer's notification.
    On a CPU box those spins take cores the other workers, the trainer and the other engines
    need: every TP worker spun for a second after each generate and each weight load. Here a
    reader sleeps at once (zmq poll) and looks at the queue again every QUEUE_RECHECK_MS.

    The notification is best effort: the writer's PUB socket keeps one message per reader and
    drops the next while one is queued (a reader that found its message without polling leaves
    that one there), so a sleeping reader can miss the message it waits for. vLLM then finds it
    at its 5 s recheck: with readers that always sleep, TP 2 engines stalled 5 s on many
    collective calls (a sync's bucket loads: the VL sync test, tests/weight_sync/test_vl_sync.py,
    took 648 s with about 100 such stalls, 81 s with this; 2026-11-28, Xeon). A 10 ms recheck
    is 100 polls a second per idle worker (microseconds each). Forked TP workers inherit both
    settings (spawned ones, at cpu_threads > 1, keep vLLM's spin and recheck). Without the
    recheck setting (another vLLM) readers keep spinning. Idempotent."""
    import inspect

    from vllm.distributed.device_communicators import shm_broadcast
    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    if hasattr(shm_broadcast, "SHM_READER_RECHECK_INTERVAL_MS"):
        shm_broadcast.SHM_READER_RECHECK_INTERVAL_MS = QUEUE_RECHECK_MS
    else:       # another vLLM: a sleeping reader could wait for a dropped notification
        logging.getLogger(__name__).warning("vLLM's shm_broadcast has no recheck interval: its "
                                            "queue readers keep spinning")
        return

    init = SpinCondition.__init__
    defaulted = [p.name for p in inspect.signature(init).parameters.values()
                 if p.default is not inspect.Parameter.empty]
    if defaulted != ["busy_loop_s"]:      # another vLLM: leave its queues as they are
        logging.getLogger(__name__).warning("vLLM's SpinCondition takes %s: its queue readers "
                                            "keep spinning", defaulted)
        return
    init.__defaults__ = (0.0,)


def queue_recheck_ms(_worker=None) -> int:
    """The recheck interval this process's vLLM queue readers use (callable by an engine's
    `collective_rpc`: each TP worker answers its own)."""
    from vllm.distributed.device_communicators import shm_broadcast

    return shm_broadcast.SHM_READER_RECHECK_INTERVAL_MS
