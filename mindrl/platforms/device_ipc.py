"""Device buffers another process on the node opens in place: CUDA IPC handles.

A weight-sync bucket in the actor host's device memory is exported once (`export`: torch's
own `reduce_tensor`, the handle CUDA gives for the allocation) and every process that takes
part in a sync (the replica's other ranks, the rollout engines' workers) opens it once
(`open_bucket`) and keeps it open across syncs; only the small `DeviceBuffer` record travels.
No byte goes through host memory.

What CUDA does not do for us, and this module does:
- The handle names a device by the exporting process's index; a process that sees other
  devices (Ray's CUDA_VISIBLE_DEVICES) would open the wrong one. The record carries the
  device's UUID and the opener finds its own index for it, or says the device is not
  visible to it.
- A handle cannot be opened by the process that exported it: there `open_bucket` returns the
  exported tensor itself.
- Ordering: torch waits on the exporter's stream at the first open only. Every later bucket
  is ordered by the transport: writers synchronise before they acknowledge, the host before
  it hands a bucket over, a reader before its load returns (`finish_reading`).

A /dev/shm path (the CPU's bucket) opens through the same `open_bucket`, so an engine's
loader takes either kind of bucket.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, Union

import torch

_EXPORTED: Dict[str, torch.Tensor] = {}      # this process's exported buffers, by key


@dataclass(frozen=True)
class DeviceBuffer:
    """A flat device tensor of `numel` elements that other processes open by IPC handle."""

    key: str                 # unique per buffer: "<exporting pid>-<sequence>"
    numel: int
    dtype: torch.dtype
    device_uuid: str         # the device holding it, as every process names it
    owner_pid: int
    rebuild: object          # torch's rebuild function and its arguments
    args: tuple

    def __str__(self) -> str:
        return f"device buffer {self.key} ({self.numel} x {self.dtype}, {self.device_uuid})"


BucketRef = Union[str, DeviceBuffer]      # a /dev/shm file's path, or a device buffer


def _uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def export(tensor: torch.Tensor, key: str) -> DeviceBuffer:
    """The record other processes open `tensor` (flat, contiguous, on a CUDA device) by. The
    exporter keeps `tensor` alive until `forget(key)`."""
    from torch.multiprocessing.reductions import reduce_tensor

    if tensor.device.type != "cuda" or tensor.dim() != 1 or not tensor.is_contiguous():
        raise ValueError(f"export wants a flat contiguous CUDA tensor, got {tensor.device} "
                         f"{tuple(tensor.shape)}")
    rebuild, args = reduce_tensor(tensor)
    _EXPORTED[key] = tensor
    return DeviceBuffer(key, tensor.numel(), tensor.dtype, _uuid(tensor.device.index),
                        os.getpid(), rebuild, tuple(args))


def forget(key: str) -> None:
    """The exporter drops its reference (readers must have closed theirs first)."""
    _EXPORTED.pop(key, None)


def current_uuid() -> str:
    """The UUID of this process's current CUDA device."""
    return _uuid(torch.cuda.current_device())


def sees(device_uuid: str) -> bool:
    """Whether this process can open buffers on that device (it is among its visible ones)."""
    return torch.cuda.is_available() and any(
        _uuid(index) == device_uuid for index in range(torch.cuda.device_count()))


def _local_index(device_uuid: str) -> int:
    for index in range(torch.cuda.device_count()):
        if _uuid(index) == device_uuid:
            return index
    raise RuntimeError(
        f"the weight-sync bucket lives on device {device_uuid}, which this process (pid "
        f"{os.getpid()}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}) "
        f"does not see: start it with that device visible, or set MINDRL_DEVICE_IPC=0 to "
        f"sync through the collective transport")


def open_bucket(ref: BucketRef, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """The flat tensor behind `ref`: a /dev/shm file mapped here, or a device buffer opened in
    place (on this process's index of its device). Open once and keep it: every open of a
    device buffer maps it again."""
    if isinstance(ref, str):
        return torch.from_file(ref, shared=True, size=numel, dtype=dtype)
    if ref.numel < numel or ref.dtype != dtype:
        raise ValueError(f"{ref} cannot hold {numel} x {dtype}")
    if ref.owner_pid == os.getpid():
        return _EXPORTED[ref.key]
    args = list(ref.args)
    args[6] = _local_index(ref.device_uuid)          # storage_device, in this process's order
    return ref.rebuild(*args)


def collect() -> None:
    """Free exported buffers whose readers have all closed them (CUDA frees them only then)."""
    torch.cuda.ipc_collect()


def bucket_key(ref: BucketRef) -> str:
    """What a reader keys its open buckets by."""
    return ref if isinstance(ref, str) else ref.key


def finish_reading(ref: BucketRef) -> None:
    """A reader of a device buffer waits for its copies out of it before it says it is done:
    the exporter writes the next bucket into the same memory as soon as it hears."""
    if not isinstance(ref, str):
        torch.cuda.synchronize()


def views(flat: torch.Tensor, entries):
    """(name, view) per (name, element offset, shape) entry of a bucket."""
    for name, offset, shape in entries:
        yield name, flat[offset:offset + math.prod(shape)].view(shape)
