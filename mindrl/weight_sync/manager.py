"""One weight sync, as the trainer sees it: `weights.sync()`.

The actor's ranks move their shards into every rollout engine (weight_sync/resharder.py on
each rank, `EngineFanout` on the host); this driver-side handle starts that collective
and decides, by `generate_config.verify_sync`, whether the sync is verified.
"""

from __future__ import annotations

from typing import Any, Dict


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

    def sync(self, after_discarded_weights: bool = False) -> Dict[str, float]:
        """One sync (a collective over the actor's ranks); whether it was verified and what
        the verification cost. after_discarded_weights: the engines woke from a sleep that
        dropped their weights (level 2): verified whatever the policy, since peers have
        shipped engines that silently generated from garbage there."""
        verify = after_discarded_weights or verify_due(self.verify, self.count)
        stats = self.actor.sync_weights(verify)
        self.count += 1
        return {"weight_sync/verified": float(verify),
                "weight_sync/relayed_bytes": float(getattr(stats, "relayed_bytes", 0)),
                "timing_s/reshard_verify": float(getattr(stats, "verify_seconds", 0.0))}
