"""The actor's same-node CPU paths of the weight sync, agreed per sync by a handshake.

Shared-memory buckets (`device.is_cpu()` and every rank of the actor on the host's node): the
bucket is a file in /dev/shm that every rank maps; each rank copies its own shards straight to
their places in the HF layout (`mapping.write_shard`: the inverse of TP sharding and fusion,
fused per part) and gloo only carries small headers and acknowledgements. vLLM's process maps
the same file, so the bytes cross once into the bucket and once into vLLM, with no TCP
transfer and no gather on the host. With vLLM in another process there are two buffers of
half a bucket: the ranks fill one while vLLM loads the other.

vLLM's shared weights (the same conditions, and a vLLM started with ``share_weights``,
``generate_config.cpu_weights: shared``): vLLM's own parameters live in a /dev/shm file, so
every rank writes its shards straight into them at once: no bucket, no vLLM load, one copy
in all. A verified sync then gathers full tensors the general way (`Resharder._hf_parts`)
for the expected fingerprints, independent of the shared layout.

`SameNodePaths` is a part of `resharding.Resharder` (it uses the resharder's ranks, units,
parameters and target); it lives here so that each file holds one way of moving bytes.
"""

from __future__ import annotations

import math
import os
import time
from typing import Dict, List, Optional

import torch

from mindrl import device
from mindrl.ckpt import mapping
from mindrl.engines.reshard_plan import (WIRE_DTYPES, SyncStats, Unit, bucket_layout,
                                         part_views, plan_buckets)
from mindrl.engines.shm_region import SHM_DIR, SharedRegion, node_id, sweep_stale
from mindrl.engines.vllm_engine import WeightSyncError

_END, _ABORT = -1, -2
P2P, BUCKET, DIRECT = 0, 1, 2     # how a sync moves the bytes (agreed per sync)
_BUCKET_PREFIX = "mindrl-reshard"


class SameNodePaths:
    """Handshake, shared-memory buckets and shared weights (see the module docstring)."""

    def _peers(self) -> List[int]:
        return [r for r in self._mp_ranks if r != self._rank]

    def _can_share(self) -> bool:
        return (device.is_cpu() and os.path.isdir(SHM_DIR)
                and os.environ.get("MINDRL_RESHARD_SHM", "1") != "0")

    def _host_handshake(self, verify: bool):
        """Every peer reports (its node, whether it can share); the host picks the path and
        tells them: [mode, bucket numel, dtype code, host pid, verify]. Shared weights also
        send their places. Returns (mode, *what the host's side of that mode needs)."""
        peers, dev = self._peers(), device.current_device()
        me = node_id()
        ok = self._can_share()
        for peer in peers:
            report = torch.empty(2, dtype=torch.long, device=dev)
            torch.distributed.recv(report, peer)
            ok = ok and int(report[0]) == me and bool(report[1])
        shared = getattr(self.target, "shared_weights", None)
        dtype = shared.dtype if shared is not None else self.target.dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        bucket_numel = max(1, int(self.bucket_mb * 2**20) // itemsize)
        mode = P2P
        if ok and dtype in WIRE_DTYPES:
            mode = DIRECT if shared is not None else BUCKET
        if mode == BUCKET and hasattr(self.target, "submit_load_from_file"):
            bucket_numel = max(1, bucket_numel // 2)    # two buffers: fill one, load the other
        decision = torch.tensor([mode, bucket_numel, WIRE_DTYPES.index(dtype)
                                 if dtype in WIRE_DTYPES else 0, os.getpid(), int(verify)],
                                dtype=torch.long, device=dev)
        for peer in peers:
            torch.distributed.send(decision, peer)
            if mode == DIRECT:
                torch.distributed.send_object_list([shared], peer)
        if mode == DIRECT:
            return mode, shared
        return (mode, bucket_numel, dtype) if mode == BUCKET else (mode,)

    def _peer_handshake(self):
        dev = device.current_device()
        host = self._mp_ranks[0]
        torch.distributed.send(torch.tensor([node_id(), int(self._can_share())],
                                            dtype=torch.long, device=dev), host)
        decision = torch.empty(5, dtype=torch.long, device=dev)
        torch.distributed.recv(decision, host)
        mode, bucket_numel, code, pid, verify = decision.tolist()
        if mode == DIRECT:
            box = [None]
            torch.distributed.recv_object_list(box, host)
            return mode, box[0], bool(verify)
        return (mode, bucket_numel, WIRE_DTYPES[code], pid) if mode == BUCKET else (mode,)

    def _region_path(self, pid: int, seq: int) -> str:
        return os.path.join(SHM_DIR, f"{_BUCKET_PREFIX}-{pid}-{seq}")

    def _bucket_region(self, slot: int, numel: int, size: int, dtype) -> SharedRegion:
        """The shared buffer of `slot`, grown to hold `numel` elements. A slot is reused only
        once vLLM is done with the bucket it last held."""
        region = self._regions[slot]
        if region is None or region.numel < numel:
            self._regions[slot] = None          # drop first: peak near max(bucket, module)
            sweep_stale(_BUCKET_PREFIX)
            self._region_seq += 1
            region = self._regions[slot] = SharedRegion(
                self._region_path(os.getpid(), self._region_seq), max(numel, size), dtype,
                create=True, seq=self._region_seq)
        return region

    def _collect_acks(self, bucket: List[Unit]) -> None:
        dev = device.current_device()
        for peer in self._peers():
            ack = torch.empty(2, dtype=torch.long, device=dev)
            torch.distributed.recv(ack, peer)
            if int(ack[0]) != 0:
                unit = bucket[int(ack[1])]
                raise WeightSyncError(
                    f"rank {peer} failed to write {unit.local_name} "
                    f"({', '.join(unit.rule.hf_names(unit.layer))}) into the bucket")

    def _host_sync_shared(self, stats: SyncStats, verify: bool, bucket_numel: int,
                          dtype: torch.dtype) -> None:
        """Bucket by bucket through shared buffers. With a vLLM in another process the ranks
        fill the next bucket while vLLM loads the current one: two buffers, each of half the
        bucket size (`_host_handshake` halves it), so together they stay within bucket_mb."""
        from mindrl.engines.weight_fingerprint import fingerprint_tensors

        peers, dev = self._peers(), device.current_device()
        itemsize = torch.empty((), dtype=dtype).element_size()
        expected: Dict[str, torch.Tensor] = {}
        submit = getattr(self.target, "submit_load_from_file", None)
        load_file = getattr(self.target, "load_weights_from_file", None)
        slots = 2 if submit is not None else 1
        pending = None                 # waits for the load in flight
        try:
            buckets = plan_buckets(self.units, bucket_numel)
            # Buffers as large as the largest bucket needs, no larger (a small model).
            size = min(bucket_numel, max(sum(u.numel for u in b) for b in buckets))
            for index, bucket in enumerate(buckets):
                t0 = time.perf_counter()
                layout = bucket_layout(bucket, self.spec)
                numel = sum(u.numel for u in bucket)
                region = self._bucket_region(index % slots, numel, size, dtype)
                header = torch.tensor([region.seq, region.numel], dtype=torch.long, device=dev)
                for peer in peers:
                    torch.distributed.send(header, peer)
                failure = self._write_shards(
                    ((unit, part_views(region.tensor, parts)) for unit, parts in layout),
                    "the bucket")
                if failure is not None:
                    raise WeightSyncError(failure[1])
                self._collect_acks(bucket)
                stats.gather_seconds += time.perf_counter() - t0
                stats.buffer_bytes = max(stats.buffer_bytes, sum(
                    r.numel for r in self._regions if r is not None) * itemsize)
                entries = [part for _, parts in layout for part in parts]
                pairs = list(zip([n for n, _, _ in entries], part_views(region.tensor, entries)))
                if verify:
                    t0 = time.perf_counter()
                    expected.update(fingerprint_tensors(pairs))
                    stats.verify_seconds += time.perf_counter() - t0
                t0 = time.perf_counter()
                if pending is not None:
                    pending, wait = None, pending
                    wait()
                if submit is not None:
                    pending = submit(region.path, region.numel, dtype, entries)
                elif load_file is not None:
                    load_file(region.path, region.numel, dtype, entries)
                else:
                    self.target.load_weights(pairs)
                stats.load_seconds += time.perf_counter() - t0
                stats.tensors += len(pairs)
                stats.bytes += numel * itemsize
                stats.buckets += 1
                del pairs
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
            self._drop_regions(load_file is not None)
            raise
        self._end_peers(_END)
        if not self.keep_buffer:
            self._drop_regions(load_file is not None)
        if verify:
            t0 = time.perf_counter()
            self.target.check_fingerprint(expected, strict=True)
            stats.verify_seconds += time.perf_counter() - t0

    def _end_peers(self, code: int) -> None:
        header = torch.tensor([code, 0], dtype=torch.long, device=device.current_device())
        for peer in self._peers():
            try:
                torch.distributed.send(header, peer)
            except Exception:      # best effort while failing
                if code != _ABORT:
                    raise

    def _drop_regions(self, target_maps_them: bool) -> None:
        release = getattr(self.target, "release_file", None) if target_maps_them else None
        if release is not None and any(r is not None for r in self._regions):
            try:
                release(None)
            except Exception:
                pass
        self._regions = [None, None]

    def _peer_sync_shared(self, bucket_numel: int, dtype: torch.dtype, host_pid: int) -> None:
        dev = device.current_device()
        host = self._mp_ranks[0]
        mapped: Dict[int, SharedRegion] = {}      # the host's buffers, by sequence number
        buckets = iter(plan_buckets(self.units, bucket_numel))
        try:
            while True:
                header = torch.empty(2, dtype=torch.long, device=dev)
                torch.distributed.recv(header, host)
                seq, numel = header.tolist()
                if seq == _END:
                    return
                if seq == _ABORT:
                    raise WeightSyncError("the resharding host aborted the weight sync")
                bucket = next(buckets)
                if seq not in mapped:
                    for old in sorted(mapped)[:-1]:      # the host keeps two at most
                        del mapped[old]
                    mapped[seq] = SharedRegion(self._region_path(host_pid, seq), numel, dtype,
                                               create=False)
                region = mapped[seq].tensor
                failure = self._write_shards(
                    ((unit, part_views(region, parts))
                     for unit, parts in bucket_layout(bucket, self.spec)), "the bucket")
                status = [0, 0] if failure is None else [1, failure[0]]
                torch.distributed.send(torch.tensor(status, dtype=torch.long, device=dev), host)
                if failure is not None:
                    raise WeightSyncError(failure[1])
        finally:
            mapped.clear()

    # ---------------------------------------------------------------- shared weights

    def _weight_views(self, shared, unit: Unit) -> List[torch.Tensor]:
        """The unit's HF tensors inside vLLM's shared weights (the file stays mapped)."""
        if self._weights is None or self._weights.path != shared.path:
            self._weights = None
            self._weights = SharedRegion(shared.path, shared.numel, shared.dtype, create=False)
        flat = self._weights.tensor
        return [flat[o:o + math.prod(shape)].view(shape)
                for o, shape in (shared.places[name] for name in unit.rule.hf_names(unit.layer))]

    def _write_weights(self, shared) -> Optional[str]:
        """This rank's shards of every tensor, straight into vLLM's weights; what failed."""
        failure = self._write_shards(
            ((unit, self._weight_views(shared, unit)) for unit in self.units),
            "vLLM's weights")
        return None if failure is None else failure[1]

    def _write_shards(self, destinations, where: str):
        """This rank's shards of each (unit, views of its HF parts) into those views
        (`mapping.write_shard`). None, or (index of the unit that failed, a message naming
        it) at the first failure."""
        for index, (unit, views) in enumerate(destinations):
            if unit.stage != self.pp_rank:
                continue
            try:
                mapping.write_shard(unit.rule, self.spec, self._params[unit.local_name].detach(),
                                    self.tp_rank, self.tp_size, views)
            except Exception as exc:
                return index, (f"rank {self._rank} failed to write {unit.local_name} "
                               f"({', '.join(unit.rule.hf_names(unit.layer))}) into {where}: "
                               f"{type(exc).__name__}: {exc}")
        return None

    def _host_sync_direct(self, stats: SyncStats, verify: bool, shared) -> None:
        """Every rank writes its shards into vLLM's shared weights at once; no bucket, no
        transfer. A rank that fails leaves them half-written: vLLM is marked unusable.
        verify: the expected fingerprints come from full tensors gathered the general way
        (`_hf_parts`), independent of the shared layout and of `mapping.write_shard`."""
        from mindrl.engines.weight_fingerprint import fingerprint_tensors

        t0 = time.perf_counter()
        failures = [self._write_weights(shared)]
        for peer in self._peers():
            box = [None]
            torch.distributed.recv_object_list(box, peer)
            failures.append(box[0])
        failures = [f for f in failures if f]
        stats.gather_seconds = time.perf_counter() - t0
        if failures:
            self.target.invalidate("; ".join(failures))
            raise WeightSyncError("weight sync into vLLM's shared weights failed: "
                                  + "; ".join(failures))
        t0 = time.perf_counter()
        self.target.weights_written()
        stats.load_seconds = time.perf_counter() - t0
        itemsize = torch.empty((), dtype=shared.dtype).element_size()
        stats.tensors = len(shared.places)
        stats.bytes = sum(math.prod(shape) for _, shape in shared.places.values()) * itemsize
        stats.buckets = 1
        if verify:
            t0 = time.perf_counter()
            expected = {}
            for unit in self.units:
                expected.update(fingerprint_tensors(self._hf_parts(unit).items()))
            self.target.check_fingerprint(expected, strict=True)
            stats.verify_seconds = time.perf_counter() - t0

    def _peer_sync_direct(self, shared, verify: bool) -> None:
        failure = self._write_weights(shared)
        torch.distributed.send_object_list([failure], self._mp_ranks[0])
        if failure:
            raise WeightSyncError(failure)
        if verify:
            self._send_full_tensors()
