"""One weight sync: the trainer's `weights.sync()` and each actor rank's side of it.

The actor's ranks move their shards into every rollout engine (weight_sync/resharder.py on
each rank, `EngineFanout` on the host, a relay receiver on each other node with engines:
`build_rank_sync`); the driver-side `WeightSync` starts that collective and decides, by
`generate_config.verify_sync`, whether the sync is verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from mindrl.weight_sync.node_relay import RelayReceiver, RelayTarget, build_relay
from mindrl.weight_sync.plan import SyncStats
from mindrl.weight_sync.resharder import Resharder
from mindrl.weight_sync.source import sync_place


def verify_due(policy: str, syncs_done: int) -> bool:
    """Whether the next sync is verified under `generate_config.verify_sync`."""
    if policy not in ("every", "first", "off"):
        raise ValueError(f"verify_sync={policy!r}: use every, first or off")
    return policy == "every" or (policy == "first" and syncs_done == 0)


class WeightSync:
    """Syncs the actor's weights into the rollout engines, verified by policy."""

    def __init__(self, actor: Any, verify: str = "first"):
        verify_due(verify, 0)
        self.actor, self.verify, self.count = actor, verify, 0

    def settle(self) -> None:
        """Wait for a deferred check, if one is pending (its WeightSyncError raises here)."""
        self.actor.settle_sync()

    def sync(self, after_discarded_weights: bool = False,
             defer_check: bool = False) -> Dict[str, float]:
        """One sync (a collective over the actor's ranks); whether it was verified and what
        the verification cost. after_discarded_weights: the engines woke from a sleep that
        dropped their weights (level 2): verified whatever the policy, since peers have
        shipped engines that silently generated from garbage there. defer_check: the engines
        compare while the run goes on; the actor's next update (or sync, or `settle`) waits
        for their verdict first, so nothing generated on unverified weights is trained on."""
        verify = after_discarded_weights or verify_due(self.verify, self.count)
        stats = self.actor.sync_weights(verify, defer_check)
        self.count += 1
        return {"weight_sync/verified": float(verify),
                "weight_sync/relayed_bytes": float(getattr(stats, "relayed_bytes", 0)),
                "timing_s/reshard_verify": float(getattr(stats, "verify_seconds", 0.0)),
                # The resharding host's own seconds (the rest of timing_s/reshard is the calls
                # reaching it) and of them the wait for the engines' loads.
                "timing_s/reshard_host": float(getattr(stats, "seconds", 0.0)),
                "timing_s/reshard_load": float(getattr(stats, "load_seconds", 0.0))}


@dataclass
class RankSync:
    """One actor rank's side of every sync: its resharder (every rank sends its shards; the
    host feeds its node's engines), and where the rank has them, the relay to other nodes
    (host) and this node's relay receiver."""

    resharder: Resharder
    relay: Optional[RelayTarget] = None
    receiver: Optional[RelayReceiver] = None

    @property
    def is_host(self) -> bool:
        return self.resharder.is_host

    def settle(self) -> None:
        """The last sync's deferred check, waited for (raises its WeightSyncError)."""
        self.resharder.settle()

    def sync(self, verify: bool = False, defer_check: bool = False) -> SyncStats:
        """This rank's part of one sync (a collective over the actor's ranks)."""
        if self.receiver is not None:      # this node's engines, fed while this rank sends
            self.receiver.start()
        try:
            stats = self.resharder.sync(verify=verify, defer_check=defer_check)
        except BaseException:
            if self.relay is not None:
                self.relay.finish(False)       # the receivers drop the bucket they hold
            raise
        if self.relay is not None:
            self.relay.finish(True)
            stats.relayed_bytes = self.relay.take_relayed_bytes()
        if self.receiver is not None:
            self.receiver.join()
        return stats

    def close(self) -> None:
        """Remove every file this rank keeps in /dev/shm (Ray runs no finalizers)."""
        self.resharder.close()
        if self.receiver is not None:
            self.receiver.close()


def build_rank_sync(model, spec, engines: Sequence[Any], engine_nodes: Sequence[str],
                    bucket_mb: float) -> RankSync:
    """This actor rank's side of the sync (a collective over the actor's ranks): the host
    feeds its node's engines, and one rank on each other node with engines receives the
    buckets for them (weight_sync/node_relay.py). engines: Ray handles of every rollout
    engine; engine_nodes: each one's Ray node."""
    active, is_host = sync_place()
    ends = build_relay(engines, engine_nodes, is_host, active)
    resharder = Resharder(model, spec, target=ends.target, bucket_mb=bucket_mb)
    return RankSync(resharder, ends.relay, ends.receiver)
