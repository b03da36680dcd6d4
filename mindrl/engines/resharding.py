"""Megatron TP/PP shards -> full HF tensors -> vLLM, streamed in bounded buckets.

`Resharder.sync` runs on every rank of the actor (TP x PP x DP processes). The rank that hosts
vLLM is TP0 / PP0 of data-parallel replica 0 (global rank 0 in Megatron's default order).
For each Megatron tensor, in `mapping.iter_rules` order:

1. the pipeline stage holding it gathers its TP shards onto its TP rank 0 (`mapping.gather`,
   or straight into place when the shards are row blocks);
2. a stage other than the host's sends the full tensor to the host (point to point);
3. the host un-fuses it into HF tensors (`mapping.mcore_to_hf`) and packs them, cast to vLLM's
   dtype, into one reusable bucket buffer; a full bucket goes to vLLM in one `load_weights`.

Other data-parallel replicas hold the same weights and skip the sync. vLLM always receives full
HF tensors and shards them itself, so any train TP/PP works with any infer TP.

Same-node CPU fast path (`device.is_cpu()` and every rank of the actor on the host's node,
agreed at the start of each sync): the bucket is a file in /dev/shm that every rank maps; each
rank copies its own shards straight to their places in the HF layout (`mapping.write_shard`: the
inverse of TP sharding and fusion, fused per part) and gloo only carries small headers and
acknowledgements. vLLM's process maps the same file, so the bytes cross once into the bucket
and once into vLLM's parameters, with no TCP transfer and no gather on the host. Other
devices, or ranks on other nodes, take the general path below.

Shared-weights path (the same conditions, and a vLLM started with ``share_weights``,
``generate_config.cpu_weights: shared``): vLLM's own parameters live in a /dev/shm file, so
every rank writes its shards straight into them at once: no bucket, no vLLM load, one copy
in all. A verified sync then gathers full tensors the general way for the expected
fingerprints, independent of the shared layout.

Memory on the host: the bucket buffer (bucket_mb) plus one tensor in flight (its TP shards,
the gathered tensor, its HF parts); a module larger than a bucket (the embedding of a big
vocabulary) goes alone, without the buffer and without a copy, so the peak stays near
max(bucket_mb, largest module). Buckets close only between modules: vLLM processes a module
once all of its tensors have arrived, and a bucket with q/k but not v would leave that module
half-loaded.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol

import torch

from mindrl import device
from mindrl.ckpt import mapping
from mindrl.engines.reshard_plan import Unit, bucket_layout, part_views, plan_buckets, plan_units
from mindrl.engines.shm_region import SHM_DIR, SharedRegion, node_id, sweep_stale
from mindrl.engines.vllm_engine import WeightSyncError
from mindrl.models.spec import ModelSpec

_WIRE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MAX_DIMS = 4


class WeightTarget(Protocol):
    """What the resharder feeds: VLLMEngine or VLLMEngineProcess."""

    dtype: torch.dtype
    wants_shared_memory: bool

    def load_weights(self, weights) -> None: ...

    def check_fingerprint(self, expected, strict: bool = True) -> None: ...


# ---------------------------------------------------------------------------- point to point

def _send(tensor: torch.Tensor, dst: int) -> None:
    """Shape and dtype header, then the data (the receiver allocates exactly)."""
    shape = list(tensor.shape) + [0] * (_MAX_DIMS - tensor.dim())
    header = torch.tensor([_WIRE_DTYPES.index(tensor.dtype), tensor.dim()] + shape,
                          dtype=torch.long, device=tensor.device)
    torch.distributed.send(header, dst)
    torch.distributed.send(tensor.contiguous(), dst)


_END, _ABORT = -1, -2
_P2P, _BUCKET, _DIRECT = 0, 1, 2     # how a sync moves the bytes (agreed per sync)
_BUCKET_PREFIX = "mindrl-reshard"


# ---------------------------------------------------------------------------- the resharder

@dataclass
class SyncStats:
    seconds: float = 0.0
    bytes: int = 0              # HF bytes handed to vLLM (host only)
    tensors: int = 0
    buckets: int = 0
    buffer_bytes: int = 0       # the bucket buffer's size (0: every bucket went direct)
    gather_seconds: float = 0.0  # TP gathers and receives from other stages
    pack_seconds: float = 0.0    # un-fusing and copying into the bucket
    load_seconds: float = 0.0    # inside vLLM's load_weights
    verify_seconds: float = 0.0


class Resharder:
    """Moves one actor's Megatron weights into vLLM; build it on every rank of the actor."""

    def __init__(self, model, spec: ModelSpec, target: Optional[WeightTarget] = None,
                 bucket_mb: float = 512.0, keep_buffer: bool = False):
        """model: the rank's GPTModel stage (DDP-wrapped is fine). target: the vLLM engine, on
        the host rank only. keep_buffer: keep the bucket buffer between syncs (faster, but
        that memory stays taken while vLLM generates)."""
        from megatron.core import parallel_state as ps

        self.ps, self.spec = ps, spec
        self.module = getattr(model, "module", model)
        vpp = ps.get_virtual_pipeline_model_parallel_world_size()
        if vpp not in (None, 1):
            raise NotImplementedError("resharding does not support virtual pipeline stages")
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        self.tp_size = ps.get_tensor_model_parallel_world_size()
        self.pp_rank = ps.get_pipeline_model_parallel_rank()
        self.pp_size = ps.get_pipeline_model_parallel_world_size()
        self.active = ps.get_data_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
        self.is_host = self.active and self.tp_rank == 0 and self.pp_rank == 0
        if self.is_host != (target is not None):
            raise ValueError(
                f"rank {torch.distributed.get_rank()}: pass the vLLM engine as target on the "
                f"host rank (TP0/PP0/DP0) and only there (this rank is "
                f"{'the host' if self.is_host else 'not the host'})")
        self.target = target
        self.bucket_mb, self.keep_buffer = bucket_mb, keep_buffer
        self.units = plan_units(spec, self.pp_size)
        self._params = dict(self.module.named_parameters())
        self._stage_ranks = torch.distributed.get_process_group_ranks(
            ps.get_pipeline_model_parallel_group())
        self._tp_ranks = torch.distributed.get_process_group_ranks(
            ps.get_tensor_model_parallel_group())
        self._mp_ranks = torch.distributed.get_process_group_ranks(
            ps.get_model_parallel_group())
        self._rank = torch.distributed.get_rank()
        self._buffer: Optional[torch.Tensor] = None
        self._regions: List[Optional[SharedRegion]] = [None, None]   # shm bucket buffers
        self._region_seq = 0
        self._weights: Optional[SharedRegion] = None   # vLLM's shared weights, when it has them

    # ---------------------------------------------------------------- pieces

    def _empty(self, shape, dtype, shared: bool) -> torch.Tensor:
        """A tensor that crosses to a vLLM process without a copy when `shared`."""
        out = torch.empty(shape, dtype=dtype, device=device.current_device())
        return out.share_memory_() if shared and self.target.wants_shared_memory else out

    def _gather_tp(self, unit: Unit, shared: bool = False) -> Optional[torch.Tensor]:
        """The full Megatron tensor on this stage's TP rank 0 (None on the others).

        Point to point rather than a gather collective: gloo's gather stages everything in a
        temporary of the full size, while recv writes straight into the destination (row-block
        shards land in place; others are put in order by `mapping.gather`).
        """
        local = self._params[unit.local_name].detach()
        if self.tp_size == 1 or unit.rule.tp_dim is None:
            return local if self.tp_rank == 0 else None
        local = local.contiguous()
        if self.tp_rank != 0:
            torch.distributed.send(local, self._tp_ranks[0])
            return None
        full = None
        if mapping.shards_are_row_blocks(unit.rule):
            full = self._empty((local.shape[0] * self.tp_size, *local.shape[1:]), local.dtype,
                               shared)
            shards = list(torch.chunk(full, self.tp_size, dim=0))
        else:
            shards = [torch.empty_like(local) for _ in range(self.tp_size)]
        shards[0].copy_(local)
        for r in range(1, self.tp_size):
            torch.distributed.recv(shards[r], self._tp_ranks[r])
        return full if full is not None else mapping.gather(unit.rule, shards)

    def _recv(self, unit: Unit, shared: bool = False) -> torch.Tensor:
        """A full tensor from the TP rank 0 of the unit's stage (shape/dtype header first)."""
        src = self._stage_ranks[unit.stage]
        header = torch.empty(2 + _MAX_DIMS, dtype=torch.long, device=device.current_device())
        torch.distributed.recv(header, src)
        code, ndim, *shape = header.tolist()
        out = self._empty(shape[:ndim], _WIRE_DTYPES[code], shared)
        torch.distributed.recv(out, src)
        return out

    def _hf_parts(self, unit: Unit, shared: bool = False) -> Dict[str, torch.Tensor]:
        full = self._gather_tp(unit, shared) if unit.stage == 0 else self._recv(unit, shared)
        return mapping.mcore_to_hf(unit.rule, full, self.spec, unit.layer)

    # ---------------------------------------------------------------- sync

    def sync(self, verify: bool = False) -> SyncStats:
        """Put this actor's current weights into vLLM (collective over the actor's ranks).

        verify: afterwards compare vLLM's fingerprint with that of every tensor sent, on all of
        vLLM's tensors (catches tensors vLLM dropped, never received or half-loaded). A wrong
        mapping entry sends consistently wrong tensors: check those against a reference with
        `VLLMEngine.check_fingerprint(checkpoint_fingerprint(hf_dir))` when both sides start
        from the same checkpoint. Failures raise WeightSyncError (fatal).
        """
        start = time.perf_counter()
        stats = SyncStats()
        if self.is_host:
            mode, *args = self._host_handshake(verify)
            if mode == _DIRECT:
                self._host_sync_direct(stats, verify, *args)
            elif mode == _BUCKET:
                self._host_sync_shared(stats, verify, *args)
            else:
                self._host_sync(stats, verify)
        elif self.active:
            mode, *args = self._peer_handshake()
            if mode == _DIRECT:
                self._peer_sync_direct(*args)
            elif mode == _BUCKET:
                self._peer_sync_shared(*args)
            else:
                self._send_full_tensors()
        stats.seconds = time.perf_counter() - start
        return stats

    def _send_full_tensors(self) -> None:
        """Peer side of the general path: each stage's TP rank 0 sends its full tensors."""
        for unit in self.units:
            if unit.stage == self.pp_rank:
                full = self._gather_tp(unit)
                if full is not None:   # TP rank 0 of a stage other than the host's
                    _send(full, self._stage_ranks[0])

    # ---------------------------------------------------------------- shm fast path

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
        mode = _P2P
        if ok and dtype in _WIRE_DTYPES:
            mode = _DIRECT if shared is not None else _BUCKET
        if mode == _BUCKET and hasattr(self.target, "submit_load_from_file"):
            bucket_numel = max(1, bucket_numel // 2)    # two buffers: fill one, load the other
        decision = torch.tensor([mode, bucket_numel, _WIRE_DTYPES.index(dtype)
                                 if dtype in _WIRE_DTYPES else 0, os.getpid(), int(verify)],
                                dtype=torch.long, device=dev)
        for peer in peers:
            torch.distributed.send(decision, peer)
            if mode == _DIRECT:
                torch.distributed.send_object_list([shared], peer)
        if mode == _DIRECT:
            return mode, shared
        return (mode, bucket_numel, dtype) if mode == _BUCKET else (mode,)

    def _peer_handshake(self):
        dev = device.current_device()
        host = self._mp_ranks[0]
        torch.distributed.send(torch.tensor([node_id(), int(self._can_share())],
                                            dtype=torch.long, device=dev), host)
        decision = torch.empty(5, dtype=torch.long, device=dev)
        torch.distributed.recv(decision, host)
        mode, bucket_numel, code, pid, verify = decision.tolist()
        if mode == _DIRECT:
            box = [None]
            torch.distributed.recv_object_list(box, host)
            return mode, box[0], bool(verify)
        return (mode, bucket_numel, _WIRE_DTYPES[code], pid) if mode == _BUCKET else (mode,)

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
            for index, bucket in enumerate(plan_buckets(self.units, bucket_numel)):
                t0 = time.perf_counter()
                layout = bucket_layout(bucket, self.spec)
                numel = sum(u.numel for u in bucket)
                region = self._bucket_region(index % slots, numel, bucket_numel, dtype)
                header = torch.tensor([region.seq, region.numel], dtype=torch.long, device=dev)
                for peer in peers:
                    torch.distributed.send(header, peer)
                for unit, parts in layout:
                    if unit.stage == self.pp_rank:
                        try:
                            mapping.write_shard(unit.rule, self.spec,
                                                self._params[unit.local_name].detach(),
                                                self.tp_rank, self.tp_size,
                                                part_views(region.tensor, parts))
                        except Exception as exc:
                            raise WeightSyncError(
                                f"rank {self._rank} failed to write {unit.local_name} "
                                f"({', '.join(unit.rule.hf_names(unit.layer))}) into the "
                                f"bucket: {type(exc).__name__}: {exc}") from exc
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
                status = torch.tensor([0, 0], dtype=torch.long, device=dev)
                failure = None
                for i, (unit, parts) in enumerate(bucket_layout(bucket, self.spec)):
                    if unit.stage != self.pp_rank:
                        continue
                    try:
                        mapping.write_shard(unit.rule, self.spec,
                                            self._params[unit.local_name].detach(),
                                            self.tp_rank, self.tp_size,
                                            part_views(mapped[seq].tensor, parts))
                    except Exception as exc:
                        status = torch.tensor([1, i], dtype=torch.long, device=dev)
                        failure = WeightSyncError(f"writing {unit.local_name} into the bucket: "
                                                  f"{type(exc).__name__}: {exc}")
                        break
                torch.distributed.send(status, host)
                if failure is not None:
                    raise failure
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
        for unit in self.units:
            if unit.stage != self.pp_rank:
                continue
            try:
                mapping.write_shard(unit.rule, self.spec, self._params[unit.local_name].detach(),
                                    self.tp_rank, self.tp_size, self._weight_views(shared, unit))
            except Exception as exc:
                return (f"rank {self._rank} writing {unit.local_name} "
                        f"({', '.join(unit.rule.hf_names(unit.layer))}) into vLLM's weights: "
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

    def _host_sync(self, stats: SyncStats, verify: bool) -> None:
        """Regular buckets are packed into one reusable buffer (cast to vLLM's dtype); a module
        larger than a bucket goes alone, straight from where it was gathered or received, and
        the buffer is dropped first, so the peak stays near max(bucket, largest module)."""
        from mindrl.engines.weight_fingerprint import fingerprint_tensors

        dtype = self.target.dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        bucket_numel = max(1, int(self.bucket_mb * 2**20) // itemsize)
        buckets = plan_buckets(self.units, bucket_numel)
        expected: Dict[str, torch.Tensor] = {}
        for bucket in buckets:
            t0 = time.perf_counter()
            numel = sum(u.numel for u in bucket)
            if numel > bucket_numel:      # one oversized module: no copy into the buffer
                self._buffer = None
                pairs = [(name, part if part.dtype == dtype else part.to(dtype))
                         for unit in bucket
                         for name, part in self._hf_parts(unit, shared=True).items()]
                stats.gather_seconds += time.perf_counter() - t0
            else:
                pairs = self._pack(bucket, self._bucket_buffer(bucket_numel), stats)
            stats.buffer_bytes = max(stats.buffer_bytes, 0 if self._buffer is None else
                                     self._buffer.numel() * itemsize)
            if verify:
                t0 = time.perf_counter()
                expected.update(fingerprint_tensors(pairs))
                stats.verify_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            self.target.load_weights(pairs)
            stats.load_seconds += time.perf_counter() - t0
            stats.tensors += len(pairs)
            stats.bytes += sum(t.numel() for _, t in pairs) * itemsize
            stats.buckets += 1
            del pairs
        if not self.keep_buffer:
            self._buffer = None
        if verify:
            t0 = time.perf_counter()
            self.target.check_fingerprint(expected, strict=True)
            stats.verify_seconds += time.perf_counter() - t0

    def _bucket_buffer(self, numel: int) -> torch.Tensor:
        if self._buffer is None or self._buffer.numel() < numel:
            self._buffer = None
            self._buffer = self._empty((numel,), self.target.dtype, shared=True)
        return self._buffer

    def _pack(self, bucket: List[Unit], buffer: torch.Tensor, stats: SyncStats):
        """HF parts of the bucket's tensors, copied (and cast) into views of the buffer."""
        pairs, offset = [], 0
        for unit in bucket:
            t0 = time.perf_counter()
            parts = self._hf_parts(unit)
            t1 = time.perf_counter()
            for name, part in parts.items():
                view = buffer[offset:offset + part.numel()].view(part.shape)
                view.copy_(part)
                pairs.append((name, view))
                offset += part.numel()
            del parts
            stats.gather_seconds += t1 - t0
            stats.pack_seconds += time.perf_counter() - t1
        return pairs
