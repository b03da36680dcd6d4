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

Same-node CPU paths (shared-memory buckets, vLLM's shared weights): `reshard_same_node`.

Memory on the host: the bucket buffer (bucket_mb) plus one tensor in flight (its TP shards,
the gathered tensor, its HF parts); a module larger than a bucket (the embedding of a big
vocabulary) goes alone, without the buffer and without a copy, so the peak stays near
max(bucket_mb, largest module). Buckets close only between modules: vLLM processes a module
once all of its tensors have arrived, and a bucket with q/k but not v would leave that module
half-loaded.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Protocol

import torch

from mindrl import device
from mindrl.ckpt import mapping
from mindrl.engines.reshard_plan import WIRE_DTYPES, SyncStats, Unit, plan_buckets, plan_units
from mindrl.engines.reshard_same_node import BUCKET, DIRECT, SameNodePaths
from mindrl.engines.shm_region import SharedRegion
from mindrl.models.spec import ModelSpec

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
    header = torch.tensor([WIRE_DTYPES.index(tensor.dtype), tensor.dim()] + shape,
                          dtype=torch.long, device=tensor.device)
    torch.distributed.send(header, dst)
    torch.distributed.send(tensor.contiguous(), dst)



# ---------------------------------------------------------------------------- the resharder

class Resharder(SameNodePaths):
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
        out = self._empty(shape[:ndim], WIRE_DTYPES[code], shared)
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
            if mode == DIRECT:
                self._host_sync_direct(stats, verify, *args)
            elif mode == BUCKET:
                self._host_sync_shared(stats, verify, *args)
            else:
                self._host_sync(stats, verify)
        elif self.active:
            mode, *args = self._peer_handshake()
            if mode == DIRECT:
                self._peer_sync_direct(*args)
            elif mode == BUCKET:
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
