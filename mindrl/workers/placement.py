"""Ray placement groups from the recipe's resources and colocation flags.

Device indices come from mindrl.config.placement (the same assignment plan mode prints):
one bundle per device, each bundle holding one rank of every role placed on that device;
colocated roles split the bundle's device evenly so Ray lets them share it (a role built in
another's processes, config/placement.host_of, takes no share). A rollout engine
on the actor's devices takes an equal share of the first device of its span, beside the actor
ranks there; an engine on devices of its own (generate_config.rollout_devices) takes the whole
first device of its span (on CPU, a CPU slot of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import ray
from ray.util.placement_group import PlacementGroup, placement_group

from mindrl.config.placement import (devices_required, engine_devices, engines_colocated,
                                     place_roles)
from mindrl.config.schema import RunConfig
from mindrl.device_kinds import placement_bundle, rank_resources


@dataclass(frozen=True)
class EngineSlot:
    """Where one rollout engine runs: a placement-group bundle (the first device of its span),
    the Ray resources it takes there, the devices it spans (for messages) and whether they are
    the actor's."""

    placement_group: Any
    bundle: int
    resources: dict
    devices: Tuple[int, ...]
    on_actor_devices: bool = True


@dataclass
class RoleSlots:
    placement_group: PlacementGroup
    first_bundle: int
    resources_per_rank: dict


def _pinned_nodes(kind: str, num_devices: int):
    """On a cluster of several nodes, each device's bundle pinned to the node the plan puts it
    on (nodes fill in order, the head first: config.cluster.node_of), so an engine's span and
    the plan's node of each rank are what Ray places; None on one node."""
    from mindrl.config.cluster import ClusterResources
    from mindrl.workers.ray_cluster import nodes_of_connected_cluster

    nodes = nodes_of_connected_cluster(kind)
    if len(nodes) < 2:
        return None
    cluster = ClusterResources(kind, 1, nodes=tuple(nodes))
    return [{"ray.io/node-id": nodes[min(cluster.node_of(d), len(nodes) - 1)].node_id}
            for d in range(num_devices)]


def create_placement(run: RunConfig, timeout_s: float = 120.0
                     ) -> Tuple[Dict[str, RoleSlots], List[EngineSlot]]:
    """One placement group over every device the run needs: role -> its bundle slots (roles
    with processes of their own), and one slot per rollout engine."""
    placements = place_roles(run)
    kind = run.resource("actor").kind
    num_devices = devices_required(run)
    pg = placement_group([placement_bundle(kind) for _ in range(num_devices)], strategy="PACK",
                         bundle_label_selector=_pinned_nodes(kind, num_devices))
    if not pg.wait(timeout_s):
        available = ray.available_resources()
        raise RuntimeError(
            f"Ray could not reserve {num_devices} x {placement_bundle(kind)} within {timeout_s:.0f} s; "
            f"the cluster offers {available}. Lower the *_resource counts in rl_config or add "
            f"nodes (ray start --address=...)")
    colocated = engines_colocated(run)
    actor_devices = set(next(p.devices for p in placements if p.role == "actor"))
    hosted = {p.role for p in placements if p.host}
    slots = {}
    for p in placements:
        if p.host:      # built in its host's processes: no rank of its own to place
            continue
        # Roles on the actor's devices leave a share there for colocated rollout engines.
        with_engine = 1 if colocated and actor_devices.intersection(p.devices) else 0
        share = 1.0 / (1 + len(set(p.shares_with) - hosted) + with_engine)
        slots[p.role] = RoleSlots(pg, p.devices[0], rank_resources(kind, share))
    # A colocated engine takes the same share of its device as an actor rank there.
    resources = slots["actor"].resources_per_rank if colocated else rank_resources(kind, 1.0)
    engines = [EngineSlot(pg, span[0], resources, span, colocated)
               for span in engine_devices(run)]
    return slots, engines
