"""The machine a figure was measured on: CPU model, the bf16 instruction sets, cores, torch's own
view of them. Figures from different machines are not comparable; every result line says which."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Sequence


def cpu_facts(cpuinfo: str) -> dict:
    """CPU model and the vector / matrix extensions bf16 would need, from /proc/cpuinfo."""
    model, flags = None, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return {"cpu_model": model, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags,
            "amx": bool({"amx_bf16", "amx_tile", "amx_int8"} & flags),
            "amx_flags": sorted(f for f in flags if f.startswith("amx"))}


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name ("unknown" where neither /proc/cpuinfo nor platform says)."""
    return cpu_facts(_cpuinfo())["cpu_model"] or platform.processor() or "unknown"


def machine_facts() -> dict:
    """The CPU and its flags, torch's view of it (bf16 support, capability), cores, the threads
    asked for, and torch's version."""
    import torch

    supported = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return {**cpu_facts(_cpuinfo()),
            "torch_avx512_bf16": supported() if supported else None,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_count": os.cpu_count(), "cpus_allowed": len(os.sched_getaffinity(0)),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch": torch.__version__}


def machine_info(shapes: Sequence) -> dict:
    """The machine (`machine_facts`), each shape's threads per process and whether a bf16
    shape ran (`shapes`: bench/common/shapes.Shape)."""
    return {**machine_facts(), "threads_per_process": {s.name: s.threads for s in shapes},
            "bf16": any(s.bf16 for s in shapes)}
