"""The shared bucket transports (every rank of the replica on the host's node): `shm_bucket`
(CPU: the bucket is a file in /dev/shm) and `device_bucket` (CUDA: the bucket is a buffer in
the host rank's device memory that the others open by IPC handle, platforms/device_ipc.py).

Every rank opens the bucket; each copies its own shards straight to their places in the HF
layout (`mapping.write_shard`: the inverse of TP sharding and fusion, fused per part) and the
process group only carries small headers and acknowledgements. Every engine on the node opens
the same bucket, so the bytes cross once into the bucket and once into each engine, with no
gather on the host (and, on a device, never through host memory). A bucket is opened once
and reused by every later sync. With engines in other processes there are two buffers of
half a bucket: the ranks fill one while the engines load the other.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

import torch

from mindrl import device
from mindrl.errors import WeightSyncError
from mindrl.platforms import device_ipc
from mindrl.shared_memory import RESHARD, SharedRegion, shm_path, sweep_stale
from mindrl.weight_sync.plan import SyncStats, Unit, bucket_layout, part_views, plan_buckets
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget

_END, _ABORT = -1, -2


class DeviceRegion:
    """A bucket in device memory: the host rank allocates and exports it, the other ranks
    open it from the host's record (`path`: what engines are handed, like a file's path)."""

    def __init__(self, numel: int, dtype: torch.dtype, seq: int,
                 ref: Optional[device_ipc.DeviceBuffer] = None):
        self.numel, self.dtype, self.seq = numel, dtype, seq
        if ref is None:
            flat = torch.empty(numel, dtype=dtype, device=device.current_device())
            ref = device_ipc.export(flat, f"{os.getpid()}-{seq}")
            self._owner = True
        else:
            flat = device_ipc.open_bucket(ref, numel, dtype)
            self._owner = False
        self.path, self.tensor = ref, flat

    def close(self) -> None:
        self.tensor = None
        if self._owner:
            device_ipc.forget(self.path.key)


class SharedBucketTransport:
    """`on_device`: buckets in the host rank's device memory (`device_bucket`), else files in
    /dev/shm (`shm_bucket`)."""

    def __init__(self, source: MegatronShards, target: WeightTarget, bucket_numel: int,
                 dtype: torch.dtype, host_pid: int, keep_buffer: bool, on_device: bool = False):
        self.source, self.target = source, target
        self.bucket_numel, self.dtype, self.host_pid = bucket_numel, dtype, host_pid
        self.keep_buffer, self.on_device = keep_buffer, on_device
        self.name = "device_bucket" if on_device else "shm_bucket"
        self._regions: List[Optional[SharedRegion]] = [None, None]
        self._seq = 0
        self._mapped: Dict[int, object] = {}    # a peer's view of the host's device buckets

    # ---------------------------------------------------------------- host

    def _bucket_region(self, slot: int, numel: int, size: int) -> SharedRegion:
        """The shared buffer of `slot`, grown to hold `numel` elements. A slot is reused only
        once the engines are done with the bucket it last held."""
        region = self._regions[slot]
        if region is None or region.numel < numel:
            if region is not None:              # drop first: peak near max(bucket, module)
                # (A device buffer's memory goes once the engines close it too: they keep
                # the last two buckets open, so opening the grown one closes it.)
                region.close()
                self._regions[slot] = region = None
            self._seq += 1
            if self.on_device:
                region = DeviceRegion(max(numel, size), self.dtype, self._seq)
            else:
                sweep_stale()
                region = SharedRegion(shm_path(RESHARD, os.getpid(), self._seq),
                                      max(numel, size), self.dtype, create=True, seq=self._seq)
            self._regions[slot] = region
        return region

    def _collect_acks(self, bucket: List[Unit]) -> None:
        dev = device.current_device()
        for peer in self.source.peers:
            ack = torch.empty(2, dtype=torch.long, device=dev)
            torch.distributed.recv(ack, peer)
            if int(ack[0]) != 0:
                unit = bucket[int(ack[1])]
                raise WeightSyncError(
                    f"rank {peer} failed to write {unit.local_name} "
                    f"({', '.join(unit.rule.hf_names(unit.layer))}) into the bucket")

    def host_sync(self, stats: SyncStats) -> None:
        """Bucket by bucket through the shared buffers, the next filled while the engines
        load the current one."""
        source, dtype, dev = self.source, self.dtype, device.current_device()
        itemsize = torch.empty((), dtype=dtype).element_size()
        slots = 2 if self.target.loads_in_background else 1
        pending = None                 # waits for the load in flight
        try:
            buckets = plan_buckets(source.units, self.bucket_numel)
            # Buffers as large as the largest bucket needs, no larger (a small model).
            size = min(self.bucket_numel, max(sum(u.numel for u in b) for b in buckets))
            for index, bucket in enumerate(buckets):
                t0 = time.perf_counter()
                layout = bucket_layout(bucket, source.spec)
                numel = sum(u.numel for u in bucket)
                region = self._bucket_region(index % slots, numel, size)
                header = torch.tensor([region.seq, region.numel], dtype=torch.long, device=dev)
                for peer in source.peers:
                    torch.distributed.send(header, peer)
                    if self.on_device:
                        torch.distributed.send_object_list([region.path], peer)
                failure = source.write_shards(
                    ((unit, part_views(region.tensor, parts)) for unit, parts in layout),
                    "the bucket")
                if failure is not None:
                    raise WeightSyncError(failure[1])
                self._collect_acks(bucket)
                if self.on_device:
                    device.synchronize()       # the bucket is whole before an engine reads it
                stats.gather_seconds += time.perf_counter() - t0
                stats.buffer_bytes = max(stats.buffer_bytes, sum(
                    r.numel for r in self._regions if r is not None) * itemsize)
                entries = [part for _, parts in layout for part in parts]
                t0 = time.perf_counter()
                if pending is not None:
                    pending, wait = None, pending
                    wait()
                pending = self.target.submit_load_from_bucket(region.path, region.numel, dtype,
                                                            entries)
                stats.load_seconds += time.perf_counter() - t0
                stats.tensors += len(entries)
                stats.bytes += numel * itemsize
                stats.buckets += 1
            if pending is not None:
                t0 = time.perf_counter()
                pending, wait = None, pending
                wait()
                stats.load_seconds += time.perf_counter() - t0
        except BaseException:
            self._end_peers(_ABORT)
            if pending is not None:
                try:
                    pending()
                except Exception:
                    pass
            self.close()
            raise
        self._end_peers(_END)
        if not (self.keep_buffer or self.on_device):    # device buckets stay open: one open
            self.close()                                # per buffer, every sync reuses it

    def _end_peers(self, code: int) -> None:
        header = torch.tensor([code, 0], dtype=torch.long, device=device.current_device())
        for peer in self.source.peers:
            try:
                torch.distributed.send(header, peer)
            except Exception:      # best effort while failing
                if code != _ABORT:
                    raise

    def close(self) -> None:
        """The engines unmap the buckets, and their files go (also the worker's shutdown
        with keep_buffer)."""
        if any(r is not None for r in self._regions):
            try:
                self.target.release_bucket(None)
            except Exception:
                pass
        for region in self._regions:
            if region is not None:
                region.close()
        self._regions = [None, None]
        self._mapped.clear()
        if self.on_device:
            device_ipc.collect()     # memory the engines held open until now

    # ---------------------------------------------------------------- peers

    def peer_sync(self) -> None:
        source, dev = self.source, device.current_device()
        # The host's buffers by sequence number: device ones stay open across syncs.
        mapped: Dict[int, object] = self._mapped if self.on_device else {}
        buckets = iter(plan_buckets(source.units, self.bucket_numel))
        try:
            while True:
                header = torch.empty(2, dtype=torch.long, device=dev)
                torch.distributed.recv(header, source.host)
                seq, numel = header.tolist()
                if seq == _END:
                    return
                if seq == _ABORT:
                    raise WeightSyncError("the resharding host aborted the weight sync")
                bucket = next(buckets)
                ref = None
                if self.on_device:
                    box = [None]
                    torch.distributed.recv_object_list(box, source.host)
                    ref = box[0]
                if seq not in mapped:
                    for old in sorted(mapped)[:-1]:      # the host keeps two at most
                        del mapped[old]
                    mapped[seq] = (DeviceRegion(numel, self.dtype, seq, ref) if self.on_device
                                   else SharedRegion(shm_path(RESHARD, self.host_pid, seq),
                                                     numel, self.dtype, create=False))
                region = mapped[seq].tensor
                failure = source.write_shards(
                    ((unit, part_views(region, parts))
                     for unit, parts in bucket_layout(bucket, source.spec)), "the bucket")
                if self.on_device:
                    device.synchronize()       # written before the host hears so
                status = [0, 0] if failure is None else [1, failure[0]]
                torch.distributed.send(torch.tensor(status, dtype=torch.long, device=dev),
                                       source.host)
                if failure is not None:
                    raise WeightSyncError(failure[1])
        except BaseException:
            mapped.clear()
            raise
        finally:
            if not self.on_device:
                mapped.clear()
