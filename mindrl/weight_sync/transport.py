"""How a sync moves the bytes: one `Transport` per way, chosen once when the sync is built.

- `collective`: the host gathers full tensors over the collective backend and hands them to
  the engines in buckets (any device, any node; collective.py).
- `shm_bucket`: every rank writes its shards into a shared-memory bucket that every engine on
  the node maps (CPU, every rank on the host's node; shm_bucket.py).
- `shared_weights`: every rank writes its shards straight into one engine's own weights
  (CPU, one engine started with shared weights; shared_weights.py).
- `device_bucket`: the `shm_bucket` protocol with the bucket in the host rank's device memory,
  opened in place by the other ranks and the engines through IPC handles (CUDA, every rank
  on the host's node, engines that see the host's device; shm_bucket.py).

`choose_transport` is a collective over the replica's model-parallel ranks: each peer says
which node it is on, whether it can map host shared memory and whether it sees the host's
device, and the host picks the cheapest transport every rank and engine can take, then
tells them.
"""

from __future__ import annotations

import os
from typing import Optional, Protocol

import torch

from mindrl import device
from mindrl.processes import node_id
from mindrl.shared_memory import SHM_DIR
from mindrl.weight_sync.plan import WIRE_DTYPES, SyncStats
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget

COLLECTIVE, SHM_BUCKET, SHARED_WEIGHTS, DEVICE_BUCKET = 0, 1, 2, 3


class Transport(Protocol):
    name: str

    def host_sync(self, stats: SyncStats) -> None: ...

    def peer_sync(self) -> None: ...

    def close(self) -> None:
        """Remove whatever this transport keeps in /dev/shm between syncs."""


def can_share_host_memory() -> bool:
    """This process can map the host's shared memory and the device lives there (CPU)."""
    return (device.weights_in_host_memory() and os.path.isdir(SHM_DIR)
            and os.environ.get("MINDRL_RESHARD_SHM", "1") != "0")


def _host_device_uuid() -> str:
    """The host rank's device as every process names it ("" where buckets stay on the host)."""
    if not device.shares_device_buffers():
        return ""
    from mindrl.platforms import device_ipc

    return device_ipc.current_uuid()


def _sees_device(device_uuid: str) -> bool:
    if not device_uuid or not device.shares_device_buffers():
        return False
    from mindrl.platforms import device_ipc

    return device_ipc.sees(device_uuid)


def _bucket_numel(bucket_mb: float, dtype: torch.dtype) -> int:
    itemsize = torch.empty((), dtype=dtype).element_size()
    return max(1, int(bucket_mb * 2**20) // itemsize)


def choose_transport(source: MegatronShards, target: Optional[WeightTarget], bucket_mb: float,
                     keep_buffer: bool = False) -> Optional[Transport]:
    """This rank's transport (the same kind on every rank of the replica; see the module
    docstring). A collective over the active ranks; inactive replicas get None."""
    from mindrl.weight_sync.collective import CollectiveTransport
    from mindrl.weight_sync.shared_weights import SharedWeightsTransport
    from mindrl.weight_sync.shm_bucket import SharedBucketTransport

    if not source.active:
        return None
    dev = device.current_device()
    if source.is_host:
        ok = can_share_host_memory()
        uuid = _host_device_uuid()
        on_device = bool(uuid) and target.can_open_device_buffers(uuid)
        me = node_id()
        for peer in source.peers:
            torch.distributed.send_object_list([uuid], peer)
        for peer in source.peers:
            report = torch.empty(3, dtype=torch.long, device=dev)
            torch.distributed.recv(report, peer)
            ok = ok and int(report[0]) == me and bool(report[1])
            on_device = on_device and int(report[0]) == me and bool(report[2])
        shared = target.shared_weights
        dtype = shared.dtype if shared is not None else target.dtype
        kind = COLLECTIVE
        if ok and dtype in WIRE_DTYPES:
            kind = SHARED_WEIGHTS if shared is not None else SHM_BUCKET
        elif on_device and dtype in WIRE_DTYPES:
            kind = DEVICE_BUCKET
        bucket_numel = _bucket_numel(bucket_mb, dtype)
        if kind in (SHM_BUCKET, DEVICE_BUCKET) and target.loads_in_background:
            bucket_numel = max(1, bucket_numel // 2)    # two buffers: fill one, load the other
        decision = torch.tensor([kind, bucket_numel, WIRE_DTYPES.index(dtype)
                                 if dtype in WIRE_DTYPES else 0, os.getpid()],
                                dtype=torch.long, device=dev)
        for peer in source.peers:
            torch.distributed.send(decision, peer)
            if kind == SHARED_WEIGHTS:
                torch.distributed.send_object_list([shared], peer)
    else:
        box = [None]
        torch.distributed.recv_object_list(box, source.host)
        torch.distributed.send(torch.tensor([node_id(), int(can_share_host_memory()),
                                             int(_sees_device(box[0]))],
                                            dtype=torch.long, device=dev), source.host)
        decision = torch.empty(4, dtype=torch.long, device=dev)
        torch.distributed.recv(decision, source.host)
        kind, bucket_numel, code, _ = decision.tolist()
        dtype = WIRE_DTYPES[code]
        shared = None
        if kind == SHARED_WEIGHTS:
            box = [None]
            torch.distributed.recv_object_list(box, source.host)
            shared = box[0]
    host_pid = int(decision[3])
    if kind == SHARED_WEIGHTS:
        return SharedWeightsTransport(source, target, shared)
    if kind in (SHM_BUCKET, DEVICE_BUCKET):
        return SharedBucketTransport(source, target, bucket_numel, dtype, host_pid, keep_buffer,
                                     on_device=kind == DEVICE_BUCKET)
    return CollectiveTransport(source, target, bucket_mb, keep_buffer)
