"""The collective transport: the host gathers full tensors and hands engines HF buckets.

For each Megatron tensor, in streaming order: the stage holding it gathers its TP shards onto
its TP rank 0 (`MegatronShards.gather_tp`); a stage other than the host's sends the full
tensor to the host (point to point); the host un-fuses it into HF tensors
(`mapping.mcore_to_hf`) and packs them, cast to the engines' dtype, into one reusable bucket
buffer; a full bucket goes to the engines in one `load_weights`. Engines always receive full
HF tensors and shard them themselves, so any train TP/PP works with any infer TP.

Memory on the host: the bucket buffer (bucket_mb) plus one tensor in flight (its TP shards,
the gathered tensor, its HF parts); a module larger than a bucket (the embedding of a big
vocabulary) goes alone, without the buffer and without a copy, so the peak stays near
max(bucket_mb, largest module). Buckets close only between modules: vLLM processes a module
once all of its tensors have arrived.
"""

from __future__ import annotations

import time
from typing import List, Optional

import torch

from mindrl import device
from mindrl.weight_sync.plan import SyncStats, Unit, plan_buckets
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget


class CollectiveTransport:
    name = "collective"

    def __init__(self, source: MegatronShards, target: WeightTarget, bucket_mb: float,
                 keep_buffer: bool):
        self.source, self.target = source, target
        self.bucket_mb, self.keep_buffer = bucket_mb, keep_buffer
        self._buffer: Optional[torch.Tensor] = None

    def _alloc(self, shape, dtype) -> torch.Tensor:
        """A tensor that crosses to a vLLM process without a copy where the target wants
        shared memory (a child process fed through torch's shared-memory pickling)."""
        out = torch.empty(shape, dtype=dtype, device=device.current_device())
        return out.share_memory_() if self.target.wants_shared_memory else out

    def peer_sync(self) -> None:
        self.source.send_full_tensors()

    def close(self) -> None:
        self._buffer = None       # torch's shared memory: nothing named in /dev/shm

    def host_sync(self, stats: SyncStats) -> None:
        """Regular buckets are packed into one reusable buffer (cast to the engines' dtype); a
        module larger than a bucket goes alone, straight from where it was gathered or
        received, and the buffer is dropped first."""
        dtype = self.target.dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        bucket_numel = max(1, int(self.bucket_mb * 2**20) // itemsize)
        for bucket in plan_buckets(self.source.units, bucket_numel):
            t0 = time.perf_counter()
            numel = sum(u.numel for u in bucket)
            if numel > bucket_numel:      # one oversized module: no copy into the buffer
                self._buffer = None
                pairs = [(name, part if part.dtype == dtype else part.to(dtype))
                         for unit in bucket
                         for name, part in self.source.hf_parts(unit, self._alloc).items()]
                stats.gather_seconds += time.perf_counter() - t0
            else:
                pairs = self._pack(bucket, self._bucket_buffer(bucket_numel, dtype), stats)
            stats.buffer_bytes = max(stats.buffer_bytes, 0 if self._buffer is None else
                                     self._buffer.numel() * itemsize)
            t0 = time.perf_counter()
            self.target.load_weights(pairs)
            stats.load_seconds += time.perf_counter() - t0
            stats.tensors += len(pairs)
            stats.bytes += sum(t.numel() for _, t in pairs) * itemsize
            stats.buckets += 1
            del pairs
        if not self.keep_buffer:
            self._buffer = None

    def _bucket_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        if self._buffer is None or self._buffer.numel() < numel:
            self._buffer = None
            self._buffer = self._alloc((numel,), dtype)
        return self._buffer

    def _pack(self, bucket: List[Unit], buffer: torch.Tensor, stats: SyncStats):
        """HF parts of the bucket's tensors, copied (and cast) into views of the buffer."""
        pairs, offset = [], 0
        for unit in bucket:
            t0 = time.perf_counter()
            parts = self.source.hf_parts(unit)
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
