"""The devices a run may use, as an explicit input to validation and planning.

Validation never probes hardware itself: callers pass a ClusterResources (tests pass the
cluster a recipe was written for); local_cluster() describes this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

_ALIASES = {"gpu": "cuda", "npu": "npu", "cuda": "cuda", "cpu": "cpu"}
RESOURCE_KEY = {"npu": "num_npus", "cuda": "num_gpus", "cpu": "num_cpus"}


@dataclass(frozen=True)
class ClusterResources:
    """device_type in {npu, cuda, cpu}; num_devices per node; device_memory_gib if known."""

    device_type: str
    num_devices: int
    num_nodes: int = 1
    device_memory_gib: Optional[float] = None

    def __post_init__(self) -> None:
        kind = _ALIASES.get(self.device_type)
        if kind is None:
            raise ValueError(f"device_type={self.device_type!r}: use one of npu, cuda, cpu")
        object.__setattr__(self, "device_type", kind)
        if self.num_devices < 1 or self.num_nodes < 1:
            raise ValueError("a cluster needs at least one node with one device")

    @property
    def total_devices(self) -> int:
        return self.num_devices * self.num_nodes

    @property
    def resource_key(self) -> str:
        return RESOURCE_KEY[self.device_type]

    def describe(self) -> str:
        mem = f", {self.device_memory_gib:g} GiB each" if self.device_memory_gib else ""
        return (f"{self.num_nodes} node(s) x {self.num_devices} {self.device_type} "
                f"device(s){mem}")


def _local_device() -> tuple[str, int]:
    """mindrl.device is the only place that knows the accelerator; CPU if it is absent."""
    try:
        from mindrl import device
    except ImportError:
        return "cpu", os.cpu_count() or 1
    return device.device_type(), device.device_count()


def local_cluster() -> ClusterResources:
    kind, count = _local_device()
    return ClusterResources(kind, max(1, int(count)), 1)
