"""The one place that knows the accelerator: npu (torch_npu, hccl), cuda (nccl) or cpu (gloo).

Everything else in MindRL asks this module for the device, the process-group backend,
synchronisation, memory figures and RNG state. On CPU it also installs the Megatron-core
compatibility layer (mindrl/platforms/cpu/megatron_compat.py), and only there.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Optional

import torch

from mindrl.device_kinds import BACKENDS, DEVICE_TYPES


@functools.lru_cache(maxsize=None)
def device_type() -> str:
    """npu / cuda / cpu; MINDRL_DEVICE forces one (e.g. cpu on a GPU box for tests)."""
    forced = os.environ.get("MINDRL_DEVICE")
    if forced:
        if forced not in DEVICE_TYPES:
            raise ValueError(f"MINDRL_DEVICE={forced!r}: use one of {DEVICE_TYPES}")
        return forced
    if importlib.util.find_spec("torch_npu") is not None:
        import torch_npu  # noqa: F401  (registers torch.npu)

        if torch.npu.is_available():
            return "npu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def is_cpu() -> bool:
    return device_type() == "cpu"


def _accel():
    """torch.cuda or torch.npu: same API surface for what we use."""
    return getattr(torch, device_type())


def device_count() -> int:
    """Devices on this node; on CPU each core counts as one device (one rank per core)."""
    if is_cpu():
        return os.cpu_count() or 1
    return _accel().device_count()


def distributed_backend() -> str:
    return BACKENDS[device_type()]


def current_device() -> torch.device:
    if is_cpu():
        return torch.device("cpu")
    return torch.device(device_type(), _accel().current_device())


def set_device(local_rank: int) -> torch.device:
    """Bind this process to its device; on CPU there is nothing to bind."""
    if not is_cpu():
        _accel().set_device(local_rank)
    return current_device()


def synchronize() -> None:
    if not is_cpu():
        _accel().synchronize()


def empty_cache() -> None:
    if not is_cpu():
        _accel().empty_cache()


def free_memory_bytes():
    """Free memory on this process's device, counting every process that uses it (what a
    sleeping vLLM engine hands back shows here); None on CPU, where nothing is set aside."""
    if is_cpu():
        return None
    return int(_accel().mem_get_info()[0])


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)
    if not is_cpu():
        _accel().manual_seed_all(seed)


def get_rng_state() -> dict:
    """Every RNG a training step draws from, for checkpoints."""
    import random

    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if not is_cpu():
        state["device"] = _accel().get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "device" in state and not is_cpu():
        _accel().set_rng_state(state["device"])


def listening_store(timeout_s: int = 600):
    """A TCPStore listening on a port the kernel chose (`.port`): the rendezvous every rank of
    a world connects to (init_distributed), held from the moment it exists."""
    import datetime

    import torch.distributed as dist

    return dist.TCPStore("0.0.0.0", 0, None, True, datetime.timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def init_distributed(rank: int, world_size: int, master_addr: str = "127.0.0.1",
                     master_port: Optional[int] = None, timeout_s: int = 600,
                     store=None) -> None:
    """Start torch.distributed with this device's backend and prepare Megatron for it.

    The rendezvous is a TCPStore someone already listens on: `store` where this process holds
    it (listening_store), else a client of master_addr:master_port. A port
    picked free and bound later can be taken in between (gloo's and Ray's connections draw
    from the same ephemeral range); a store that listens from the moment its port is chosen
    cannot lose it. A world of one with no port listens on its own."""
    import datetime

    import torch.distributed as dist

    if master_port is not None:
        os.environ["MASTER_PORT"] = str(master_port)
    os.environ.setdefault("MASTER_ADDR", master_addr)
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None and master_port is None:
            if world_size != 1:
                raise ValueError("init_distributed: a world of several ranks needs the store's "
                                 "master_port (or the store itself on the rank that holds it)")
            store = listening_store(timeout_s)
        elif store is None:
            store = dist.TCPStore(master_addr, master_port, None, False, timeout)
        dist.init_process_group(backend=distributed_backend(), store=store, rank=rank,
                                world_size=world_size, timeout=timeout)
    prepare_megatron()


def prepare_megatron() -> None:
    """Make Megatron-core usable on this device: on CPU install the compatibility layer;
    on every device bind what its MoE code reads from Transformer Engine when TE is absent."""
    if is_cpu():
        from mindrl.platforms.cpu import megatron_compat

        megatron_compat.install()
    from mindrl.platforms import megatron_without_te

    megatron_without_te.bind_te_general_gemm()


# What a rank of ours imports from Megatron (models, optimizer, checkpoints, schedules).
MEGATRON_RANK_MODULES = ("megatron.core.tensor_parallel.random", "megatron.core.models.gpt",
                         "megatron.core.optimizer", "megatron.core.dist_checkpointing",
                         "megatron.core.distributed", "megatron.core.pipeline_parallel")


def import_megatron() -> None:
    """Import the Megatron modules every rank uses, as this device needs them imported, and
    install nothing (spawn_local's fork server holds them: mindrl/rank_imports.py)."""
    if is_cpu():
        from mindrl.platforms.cpu import megatron_compat

        megatron_compat.import_megatron(MEGATRON_RANK_MODULES)
    else:
        for name in MEGATRON_RANK_MODULES:
            importlib.import_module(name)


def weights_in_host_memory() -> bool:
    """The device computes on host memory (CPU): processes on one node can share weight bytes
    through /dev/shm instead of moving them over the collective backend."""
    return is_cpu()


def shares_device_buffers() -> bool:
    """Processes on a node can open each other's device memory in place (CUDA IPC handles,
    mindrl/platforms/device_ipc.py), so a weight-sync bucket never leaves the device.
    MINDRL_DEVICE_IPC=0 turns it off (the sync then takes the collective transport)."""
    return device_type() == "cuda" and os.environ.get("MINDRL_DEVICE_IPC", "1") != "0"


def fused_kernels():
    """torch.compile's fused kernels, as a function compiler (fn -> compiled fn), where this
    device compiles elementwise work into them (mindrl/platforms/fused_kernels.py says which);
    None elsewhere: callers then run their eager path."""
    from mindrl.platforms.fused_kernels import compiler_for

    return compiler_for(device_type())


def varlen_attention(dtype: torch.dtype):
    """The device's packed causal attention for `dtype` (attend(q, k, v, cu_seqlens,
    max_seqlen, scale) on [T, heads, D]), or None: the caller then runs exact SDPA per
    sequence (mindrl/platforms/varlen_attention.py says which device has which)."""
    if device_type() == "cuda":
        from mindrl.platforms.varlen_attention import cuda_varlen

        return cuda_varlen(dtype)
    return None


@functools.lru_cache(maxsize=None)
def bf16_supported() -> bool:
    """Whether this device computes in bfloat16 natively, as torch itself reports it; a recipe
    asking for bf16 where this is False is refused before start (config/checks/dtype.py).

    Asked, never assumed: CPUs of one size differ. An AVX-512 bf16 (or AMX bf16, or Arm bf16)
    CPU runs bf16 matmuls in its own instructions; an AVX2-only one has none, and there torch's
    bf16 linear ran 8-40x slower than fp32 (docs/platforms.md#bf16). CUDA: native bf16 only
    (`including_emulation=False`: compute capability 8.0 and up), by the same rule; emulated
    bf16 on an older GPU would train, slowly. Ascend NPUs all compute in bf16."""
    kind = device_type()
    if kind == "npu":
        return True
    if kind == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    caps = torch.cpu.get_capabilities()
    return any(bool(caps.get(name, False))
               for name in ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16"))


@functools.lru_cache(maxsize=None)
def grouped_gemm(dtype: torch.dtype):
    """This device's grouped GEMM in `dtype` (grouped_mm(x, weights [E, in, out], ends) ->
    every group's rows times its weights in one call: a MoE layer's experts at once,
    models/grouped_experts.py), or None where it does not run (then experts go one by one);
    probed once per dtype (mindrl/platforms/grouped_gemm.py)."""
    from mindrl.platforms.grouped_gemm import grouped_mm, grouped_mm_works

    return grouped_mm if grouped_mm_works(current_device(), dtype) else None


def grouped_gemm_by_default() -> bool:
    """Whether MoE experts run grouped here when the recipe leaves moe_grouped_gemm null
    (where it runs at all): a measured choice per device kind (platforms/grouped_gemm.py)."""
    from mindrl.platforms.grouped_gemm import DEFAULT_ON

    return DEFAULT_ON.get(device_type(), False)


def megatron_config() -> dict:
    """TransformerConfig values this platform decides (host initialisation, fused kernels,
    pipeline stream sync: mindrl/platforms/cpu/megatron_settings.py)."""
    from mindrl.platforms.cpu.megatron_settings import (MEGATRON_CPU_CONFIG,
                                                        MEGATRON_DEVICE_CONFIG)

    return dict(MEGATRON_CPU_CONFIG if is_cpu() else MEGATRON_DEVICE_CONFIG)


def set_compute_threads(threads: int) -> None:
    """CPU: the torch threads this process computes with (one per process unless a role asks
    for more: two per process on a loaded 2-core box ran 17x slower). Accelerators compute on
    the device, so torch's host default stays."""
    if is_cpu():
        torch.set_num_threads(threads)


def local_ray_resources(num_local_devices: int) -> dict:
    """`ray.init` arguments for a private local cluster: on CPU every device is a logical CPU
    slot, so Ray counts at least as many as the run asks for (a miniature may ask for more
    than the cores); accelerators are found by Ray itself."""
    if is_cpu():
        return {"num_cpus": max(num_local_devices, os.cpu_count() or 1)}
    return {}


def vllm_build():
    """The vLLM build this platform runs, as engines/ needs it: engine keyword arguments and
    the weight loaders it offers beyond vLLM's reload (platforms/vllm_build.py; the CPU build's
    in platforms/cpu/vllm_build.py)."""
    if is_cpu():
        from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild

        return CPUVLLMBuild()
    from mindrl.platforms.vllm_build import VLLMBuild

    return VLLMBuild(device_type())


def engines_can_sleep() -> bool:
    """vLLM can hand its device memory back between rollouts (`LLM.sleep` / `wake_up`: the
    CUDA build's allocator, vllm-ascend's on NPU); the CPU build cannot."""
    return not is_cpu()


def prepare_vllm(cpu_threads: int) -> None:
    """Make this process ready to start a vLLM engine: on CPU, threads and stale shared
    memory (mindrl/platforms/cpu/vllm_start.py); nothing elsewhere."""
    if is_cpu():
        from mindrl.platforms.cpu.vllm_start import prepare_vllm_process

        prepare_vllm_process(cpu_threads)


def seed_model_parallel(seed: int) -> None:
    """Megatron's TP-aware RNG tracker, with CPU generators on CPU."""
    from megatron.core import tensor_parallel

    prepare_megatron()
    manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)
