"""The shared-weights transport (CPU, one engine started with ``share_weights``,
``generate_config.cpu_weights: shared``): vLLM's own parameters live in a /dev/shm file, so
every rank writes its shards straight into them at once: no bucket, no load, one copy in all.
A verified sync's expected fingerprints come from the ranks' own shards (Resharder), not
from the shared layout or `mapping.write_shard`.
"""

from __future__ import annotations

import math
import time
from typing import List, Optional

import torch

from mindrl.errors import WeightSyncError
from mindrl.shared_memory import SharedRegion
from mindrl.weight_sync.plan import SyncStats, Unit
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget


class SharedWeightsTransport:
    name = "shared_weights"
    announces_written = True      # host_sync ends with target.weights_written() (or the
                                  # engine resets at its next generate: `resets_lazily`)

    def __init__(self, source: MegatronShards, target: WeightTarget, shared):
        self.source, self.target, self.shared = source, target, shared
        self._weights: Optional[SharedRegion] = None

    def _views(self, unit: Unit) -> List[torch.Tensor]:
        """The unit's HF tensors inside vLLM's shared weights (the file stays mapped)."""
        shared = self.shared
        if self._weights is None or self._weights.path != shared.path:
            self._weights = None
            self._weights = SharedRegion(shared.path, shared.numel, shared.dtype, create=False)
        flat = self._weights.tensor
        return [flat[o:o + math.prod(shape)].view(shape)
                for o, shape in (shared.place(name) for name in unit.rule.hf_names(unit.layer))]

    def _write(self) -> Optional[str]:
        """This rank's shards of every tensor, straight into vLLM's weights; what failed."""
        failure = self.source.write_shards(
            ((unit, self._views(unit)) for unit in self.source.units), "vLLM's weights")
        return None if failure is None else failure[1]

    def host_sync(self, stats: SyncStats) -> None:
        """Every rank writes at once. A rank that fails leaves the weights half-written: vLLM
        is marked unusable."""
        t0 = time.perf_counter()
        failures = [self._write()]
        for peer in self.source.peers:
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
        if not getattr(self.target, "resets_lazily", False):   # else at its next generate
            self.target.weights_written()
        stats.load_seconds = time.perf_counter() - t0
        itemsize = torch.empty((), dtype=self.shared.dtype).element_size()
        stats.tensors = len(self.shared.places)
        stats.bytes = sum(math.prod(shape) for _, shape in self.shared.places.values()) * itemsize
        stats.buckets = 1

    def close(self) -> None:
        self._weights = None      # a mapping of vLLM's file: the engine removes the file

    def peer_sync(self) -> None:
        failure = self._write()
        torch.distributed.send_object_list([failure], self.source.host)
        if failure:
            raise WeightSyncError(failure)
