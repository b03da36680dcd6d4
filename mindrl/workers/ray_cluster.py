"""The cluster as Ray sees it: every alive node, by node id, with its device count.

With RAY_ADDRESS set, validation and the plan run against this instead of the local machine,
and placement pins each device's bundle to the node the plan put it on (several nodes may
share an IP, so nodes are told apart by id, never by address).
"""

from __future__ import annotations

import socket
from typing import List, Optional

from mindrl import device
from mindrl.config.cluster import ClusterNode, ClusterResources
from mindrl.device_kinds import RAY_RESOURCE
from mindrl.workers.node_versions import check_node_versions

HEAD_RESOURCE = "node:__internal_head__"


def check_address(address: str, timeout_s: float = 10.0) -> None:
    """A `host:port` that does not accept a connection fails at once, naming it (Ray itself
    retries for minutes). `auto` and `ray://` addresses are left to Ray."""
    if address in ("auto", "local") or "://" in address or ":" not in address:
        return
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        raise ConnectionError(
            f"RAY_ADDRESS={address} does not answer ({e}); start the head node with `ray "
            f"start --head --port={port}` there, or unset RAY_ADDRESS to run on this machine "
            f"alone") from None


def nodes_of_connected_cluster(kind: Optional[str] = None) -> List[ClusterNode]:
    """Alive nodes with at least one device of `kind` (default: this platform's), the head
    node first, then by node id; Ray must be initialised."""
    import ray

    key = RAY_RESOURCE[kind or device.device_type()]
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(key, 0) >= 1]
    nodes.sort(key=lambda n: (HEAD_RESOURCE not in n["Resources"], n["NodeID"]))
    return [ClusterNode(n["NodeID"], n["NodeManagerAddress"], int(n["Resources"][key]))
            for n in nodes]


def read_ray_cluster(address: str) -> ClusterResources:
    """Connect to the cluster at `address`, read its nodes, check that every node runs the
    head's software (node_versions.py), disconnect."""
    import ray

    check_address(address)
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        nodes = nodes_of_connected_cluster()
        check_node_versions([n.node_id for n in nodes])
    finally:
        ray.shutdown()
    kind = device.device_type()
    if not nodes:
        raise ConnectionError(f"the Ray cluster at {address} has no node with a "
                              f"{RAY_RESOURCE[kind]} resource")
    return ClusterResources(kind, 1, nodes=tuple(nodes))
