"""The devices a run may use, as an explicit input to validation and planning.

Validation never probes hardware itself: callers pass a ClusterResources (tests pass the
cluster a recipe was written for); local_cluster() describes this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from mindrl.device_kinds import ALIASES, RESOURCE_KEYS


@dataclass(frozen=True)
class ClusterNode:
    """One node as Ray sees it: nodes are told apart by id (several may share an IP)."""

    node_id: str
    address: str
    num_devices: int

    def label(self, index: int) -> str:
        return f"node {index} ({self.address}, id {self.node_id[:8]})"


@dataclass(frozen=True)
class ClusterResources:
    """device_type in {npu, cuda, cpu}; num_devices per node; device_memory_gib if known.
    `nodes`, when read from a running Ray cluster, lists every node with its own device
    count (num_nodes and num_devices then follow from it: the largest node's count).
    `bf16`: whether the devices compute in bfloat16 (device.bf16_supported()); None when
    unknown (a Ray cluster's nodes are not asked), and then not checked."""

    device_type: str
    num_devices: int
    num_nodes: int = 1
    device_memory_gib: Optional[float] = None
    nodes: tuple[ClusterNode, ...] = ()
    bf16: Optional[bool] = None

    def __post_init__(self) -> None:
        kind = ALIASES.get(self.device_type)
        if kind is None:
            raise ValueError(f"device_type={self.device_type!r}: use one of npu, cuda, cpu")
        object.__setattr__(self, "device_type", kind)
        if self.nodes:
            object.__setattr__(self, "num_nodes", len(self.nodes))
            object.__setattr__(self, "num_devices", max(n.num_devices for n in self.nodes))
        if self.num_devices < 1 or self.num_nodes < 1:
            raise ValueError("a cluster needs at least one node with one device")

    @property
    def node_device_counts(self) -> list[int]:
        return ([n.num_devices for n in self.nodes] if self.nodes
                else [self.num_devices] * self.num_nodes)

    @property
    def total_devices(self) -> int:
        return sum(self.node_device_counts)

    def node_of(self, device: int) -> int:
        """The node holding global device index `device` (nodes fill in order); num_nodes
        when it lies beyond the cluster."""
        end = 0
        for index, count in enumerate(self.node_device_counts):
            end += count
            if device < end:
                return index
        return self.num_nodes

    @property
    def resource_key(self) -> str:
        return RESOURCE_KEYS[self.device_type]

    def describe(self) -> str:
        mem = f", {self.device_memory_gib:g} GiB each" if self.device_memory_gib else ""
        if self.bf16 is False:
            mem += ", no bf16"
        if self.nodes:
            each = "; ".join(f"{n.label(i)}: {n.num_devices}" for i, n in enumerate(self.nodes))
            return f"{self.num_nodes} node(s) of {self.device_type} devices{mem}: {each}"
        return (f"{self.num_nodes} node(s) x {self.num_devices} {self.device_type} "
                f"device(s){mem}")


def _local_device() -> tuple[str, int, Optional[bool]]:
    """mindrl.device is the only place that knows the accelerator (and whether it computes in
    bf16); CPU of unknown bf16 if it is absent."""
    try:
        from mindrl import device
    except ImportError:
        return "cpu", os.cpu_count() or 1, None
    return device.device_type(), device.device_count(), device.bf16_supported()


def local_cluster() -> ClusterResources:
    kind, count, bf16 = _local_device()
    return ClusterResources(kind, max(1, int(count)), 1, bf16=bf16)
