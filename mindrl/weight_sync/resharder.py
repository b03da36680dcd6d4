"""Megatron TP/PP shards -> HF tensors -> every rollout engine: one sync, one interface.

`Resharder` runs on every rank of the actor. Built once, it fixes the transport (a
collective agreement, transport.py); each `sync` then moves this actor's current weights
into the engines by that transport and, when asked, verifies them: the engines' fingerprints
against the actor's own (each engine and each rank computes its share where its weights are;
only digests and probe products cross: weight_sync/fingerprint.py). One check for every
transport.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from mindrl import device
from mindrl.config.model_spec import ModelSpec
from mindrl.weight_sync.fingerprint import expected_fingerprints
from mindrl.weight_sync.plan import WIRE_DTYPES, SyncStats
from mindrl.weight_sync.source import MegatronShards
from mindrl.weight_sync.target import WeightTarget
from mindrl.weight_sync.transport import choose_transport


class Resharder:
    """Moves one actor's Megatron weights into the rollout engines; build it on every rank
    of the actor (a collective)."""

    def __init__(self, model, spec: ModelSpec, target: Optional[WeightTarget] = None,
                 bucket_mb: float = 512.0, keep_buffer: bool = False):
        """model: the rank's GPTModel stage (DDP-wrapped is fine). target: the engines, on
        the host rank (TP0/PP0/DP0) only. keep_buffer: keep the bucket buffers between syncs
        (faster, but that memory stays taken while the engines generate)."""
        self.source = MegatronShards(model, spec)
        self.is_host = self.source.is_host
        if self.is_host != (target is not None):
            raise ValueError(
                f"rank {torch.distributed.get_rank()}: pass the engines as target on the "
                f"host rank (TP0/PP0/DP0) and only there (this rank is "
                f"{'the host' if self.is_host else 'not the host'})")
        self.target = target
        self.transport = choose_transport(self.source, target, bucket_mb, keep_buffer)
        self._verdict = None      # a deferred check's wait (settle), host only

    def settle(self) -> None:
        """Wait for the last sync's deferred check (`sync(defer_check=True)`); raises its
        WeightSyncError. A no-op when none is pending (and on every rank but the host)."""
        verdict, self._verdict = self._verdict, None
        if verdict is not None:
            verdict()

    def sync(self, verify: bool = False, defer_check: bool = False) -> SyncStats:
        """Put this actor's current weights into the engines (collective over the actor's
        ranks). verify: afterwards compare the engines' fingerprints with those of every
        tensor sent (catches tensors dropped, never received or half-loaded). A wrong mapping
        entry sends consistently wrong tensors: check those against a reference with
        `check_fingerprint(checkpoint_fingerprint(hf_dir))` when both sides start from the same
        checkpoint. Failures raise WeightSyncError (fatal). defer_check: the engines compare
        while the caller goes on, and `settle` (at the latest the next sync) takes their
        verdict; where the target cannot (a relay across nodes) the check is immediate."""
        self.settle()
        start = time.perf_counter()
        stats = SyncStats(transport=self.transport.name if self.transport is not None else "")
        stats.expert_gather_numel = self.source.gather_experts()   # EP > 1 only
        self.source.merge_adapters()                               # LoRA only
        try:
            self._sync(stats, verify, defer_check)
        finally:
            self.source.release_experts()
            self.source.release_merged()
        stats.seconds = time.perf_counter() - start
        return stats

    def _sync(self, stats: SyncStats, verify: bool, defer_check: bool = False) -> None:
        if self.transport is not None:
            dev = device.current_device()
            if self.is_host:
                dtype = self.target.dtype
                flag = torch.tensor([int(verify), WIRE_DTYPES.index(dtype)], dtype=torch.long,
                                    device=dev)
                for peer in self.source.peers:
                    torch.distributed.send(flag, peer)
                self.transport.host_sync(stats)
                if self.target.stages_weights and not getattr(
                        self.transport, "announces_written", False):
                    t0 = time.perf_counter()
                    self.target.weights_written()    # the staged version goes in (commit)
                    stats.load_seconds += time.perf_counter() - t0
                if verify:
                    self._verify(stats, dtype, defer_check)
            else:
                flag = torch.empty(2, dtype=torch.long, device=dev)
                torch.distributed.recv(flag, self.source.host)
                verify, dtype = bool(flag[0]), WIRE_DTYPES[int(flag[1])]
                self.transport.peer_sync()
                if verify:
                    expected_fingerprints(self.source, dtype)

    def close(self) -> None:
        """Remove what the transport keeps in /dev/shm (the worker's shutdown)."""
        if self.transport is not None:
            self.transport.close()

    def _verify(self, stats: SyncStats, dtype: torch.dtype, defer: bool = False) -> None:
        """Host: the actor's expected fingerprints (every rank its share) against every
        engine's (every node's, through the relay); a mismatch raises WeightSyncError, at
        once or (defer, where the target can submit its check) from `settle`."""
        t0 = time.perf_counter()
        self.target.start_fingerprint()          # the engines digest while the ranks do
        t1 = time.perf_counter()                 # (an in-process engine digests right here)
        expected = expected_fingerprints(self.source, dtype)
        stats.expected_seconds = time.perf_counter() - t1
        if defer and hasattr(self.target, "submit_check"):
            self._verdict = self.target.submit_check(expected, strict=True)
        else:
            self.target.check_fingerprint(expected, strict=True)
        stats.verify_seconds = time.perf_counter() - t0
