"""The shared-memory bucket transport (CPU, every rank of the replica on the host's node).

The bucket is a file in /dev/shm that every rank maps; each rank copies its own shards
straight to their places in the HF layout (`mapping.write_shard`: the inverse of TP sharding
and fusion, fused per part) and gloo only carries small headers and acknowledgements. Every
engine on the node maps the same file, so the bytes cross once into the bucket and once into
each engine, with no TCP transfer and no gather on the host. With engines in other processes
there are two buffers of half a bucket: the ranks fill one while the engines load the other.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

import torch

from mindrl import device
from mindrl.errors import WeightSyncError
from mindrl.shared_memory import RESHARD, SharedRegion, shm_path, sweep_stale
from mindrl.weight_sync.plan import SyncStats, Unit, bucket_layout, part_views, plan_buckets
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget

_END, _ABORT = -1, -2


class SharedBucketTransport:
    name = "shm_bucket"

    def __init__(self, source: MegatronShards, target: WeightTarget, bucket_numel: int,
                 dtype: torch.dtype,
                 host_pid: int, keep_buffer: bool):
        self.source, self.target = source, target
        self.bucket_numel, self.dtype, self.host_pid = bucket_numel, dtype, host_pid
        self.keep_buffer = keep_buffer
        self._regions: List[Optional[SharedRegion]] = [None, None]
        self._seq = 0

    # ---------------------------------------------------------------- host

    def _bucket_region(self, slot: int, numel: int, size: int) -> SharedRegion:
        """The shared buffer of `slot`, grown to hold `numel` elements. A slot is reused only
        once the engines are done with the bucket it last held."""
        region = self._regions[slot]
        if region is None or region.numel < numel:
            if region is not None:              # drop first: peak near max(bucket, module)
                region.close()
                self._regions[slot] = region = None
            sweep_stale()
            self._seq += 1
            region = self._regions[slot] = SharedRegion(
                shm_path(RESHARD, os.getpid(), self._seq), max(numel, size), self.dtype,
                create=True, seq=self._seq)
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
                failure = source.write_shards(
                    ((unit, part_views(region.tensor, parts)) for unit, parts in layout),
                    "the bucket")
                if failure is not None:
                    raise WeightSyncError(failure[1])
                self._collect_acks(bucket)
                stats.gather_seconds += time.perf_counter() - t0
                stats.buffer_bytes = max(stats.buffer_bytes, sum(
                    r.numel for r in self._regions if r is not None) * itemsize)
                entries = [part for _, parts in layout for part in parts]
                t0 = time.perf_counter()
                if pending is not None:
                    pending, wait = None, pending
                    wait()
                pending = self.target.submit_load_from_file(region.path, region.numel, dtype,
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
        if not self.keep_buffer:
            self.close()

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
                self.target.release_file(None)
            except Exception:
                pass
        for region in self._regions:
            if region is not None:
                region.close()
        self._regions = [None, None]

    # ---------------------------------------------------------------- peers

    def peer_sync(self) -> None:
        source, dev = self.source, device.current_device()
        mapped: Dict[int, SharedRegion] = {}      # the host's buffers, by sequence number
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
                if seq not in mapped:
                    for old in sorted(mapped)[:-1]:      # the host keeps two at most
                        del mapped[old]
                    mapped[seq] = SharedRegion(shm_path(RESHARD, self.host_pid, seq), numel,
                                               self.dtype, create=False)
                region = mapped[seq].tensor
                failure = source.write_shards(
                    ((unit, part_views(region, parts))
                     for unit, parts in bucket_layout(bucket, source.spec)), "the bucket")
                status = [0, 0] if failure is None else [1, failure[0]]
                torch.distributed.send(torch.tensor(status, dtype=torch.long, device=dev),
                                       source.host)
                if failure is not None:
                    raise WeightSyncError(failure[1])
        finally:
            mapped.clear()
