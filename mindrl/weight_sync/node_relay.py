"""Weights to engines on other nodes: one receiver per node, fed over the collective backend.

The host rank's transports (collective, shm_bucket) feed the engines on the host's node. For
every other node that hosts engines, one actor rank there (the lowest that takes no part in
the sync itself: a rank of another data-parallel replica) is that node's receiver: the host
broadcasts each finished bucket (one flat tensor, plus its entries: HF name, offset, shape)
over a process group of the host and the receivers (gloo on CPU, nccl / hccl on devices);
each receiver takes it straight into a shared-memory file of its node, and that node's
engines load it from there, as the host's do. The bytes cross the network once per node, and
every process holds at most one bucket (or one module larger than a bucket).

A verified sync covers every node: the host sends its expected fingerprints, each receiver
has its node's engines check them, and the answers come back to the host, which names the
node and engine of a mismatch. The receivers' loop ends with the host's `finish`.

A receiver takes the buckets in a thread of its own, so a rank that also sends its shards in
the same sync (replica 0's TP x PP group spanning nodes, as the 32B recipe's pipeline does)
can receive without the two waiting on each other; the relay has a process group of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from mindrl import device
from mindrl.errors import WeightSyncError
from mindrl.processes import this_node
from mindrl.shared_memory import RELAY, SharedRegion, shm_path
from mindrl.weight_sync.engine_fanout import EngineFanout
from mindrl.weight_sync.target import Entry, WeightTarget

_BUCKET, _RELEASE, _WRITTEN, _INVALIDATE, _CHECK, _END, _ABORT = range(7)


@dataclass(frozen=True)
class RelayPlan:
    """Who feeds which engines: the host's node and, per other node, its receiver rank."""

    host_node: str
    local_engines: Tuple[int, ...]                       # engine indices on the host's node
    receivers: Dict[str, int]                            # node -> receiver's global rank
    remote_engines: Dict[str, Tuple[int, ...]]           # node -> engine indices

    @property
    def group_ranks(self) -> List[int]:
        return sorted(self.receivers.values())


def plan_relay(rank_nodes: Sequence[str], engine_nodes: Sequence[str], host_rank: int,
               active_ranks: Sequence[int]) -> RelayPlan:
    """Pure: rank_nodes[r] is global rank r's node, engine_nodes[e] engine e's. A node's
    receiver is its lowest rank that takes no part in sending (another replica's), else its
    lowest rank (it receives in a thread of its own while it sends: `RelayReceiver.start`)."""
    host_node = rank_nodes[host_rank]
    by_node: Dict[str, List[int]] = {}
    for index, node in enumerate(engine_nodes):
        by_node.setdefault(node, []).append(index)
    receivers, remote = {}, {}
    for node, engines in by_node.items():
        if node == host_node:
            continue
        here = [r for r, n in enumerate(rank_nodes) if n == node]
        if not here:
            raise WeightSyncError(f"rollout engines {engines} are on node {node[:8]}, which "
                                  f"has no actor rank to receive their weights")
        free = [r for r in here if r not in active_ranks]
        receivers[node], remote[node] = (free or here)[0], tuple(engines)
    return RelayPlan(host_node, tuple(by_node.get(host_node, ())), receivers, remote)


def _send_object(obj, group, src: int) -> None:
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src, group=group)


def _recv_object(group, src: int):
    box = [None]
    torch.distributed.broadcast_object_list(box, src=src, group=group)
    return box[0]


class RelayTarget:
    """The host's target (a WeightTarget): its node's engines, plus every other node through
    its receiver. `finish` ends each sync's messages to the receivers."""

    shared_weights = None
    wants_shared_memory = False
    loads_in_background = False    # the broadcast to the receivers runs in the caller's thread

    def __init__(self, local, group, host_rank: int, nodes: Sequence[str]):
        self.local, self.group, self.host = local, group, host_rank
        self.nodes = list(nodes)              # receiver order: the group's ranks, sorted
        self.dtype = local.dtype
        self.stages_weights = local.stages_weights
        self.bytes_relayed = 0

    def _op(self, code: int, payload=None) -> None:
        _send_object((code, payload), self.group, self.host)

    def _bucket(self, flat: torch.Tensor, entries: Sequence[Entry]) -> None:
        self._op(_BUCKET, (flat.numel(), str(flat.dtype), list(entries)))
        torch.distributed.broadcast(flat.contiguous(), src=self.host, group=self.group)
        self.bytes_relayed += flat.numel() * flat.element_size() * len(self.nodes)

    # ---------------------------------------------------------------- WeightTarget

    def load_weights(self, weights) -> None:
        pairs = list(weights)
        entries, offset = [], 0
        for name, tensor in pairs:
            entries.append((name, offset, tuple(tensor.shape)))
            offset += tensor.numel()
        flat = torch.cat([t.reshape(-1).to(self.dtype) for _, t in pairs]) if pairs else \
            torch.empty(0, dtype=self.dtype)
        self._bucket(flat.to(device.current_device()), entries)
        self.local.load_weights(pairs)

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        """No: the other nodes' engines cannot open this node's device memory."""
        return False

    def load_weights_from_bucket(self, path: str, numel: int, dtype: torch.dtype,
                                 entries: Sequence[Entry]) -> None:
        flat = torch.from_file(path, shared=True, size=numel, dtype=dtype)
        self._bucket(flat.to(device.current_device()), entries)
        self.local.load_weights_from_bucket(path, numel, dtype, entries)

    def submit_load_from_bucket(self, path: str, numel: int, dtype: torch.dtype,
                                entries: Sequence[Entry]) -> Callable[[], None]:
        """`load_weights_from_bucket`, whole before it returns: nothing left to wait for."""
        self.load_weights_from_bucket(path, numel, dtype, entries)
        return lambda: None

    def release_bucket(self, path: Optional[str] = None) -> None:
        self._op(_RELEASE)
        self.local.release_bucket(path)

    def weights_written(self) -> None:
        self._op(_WRITTEN)
        self.local.weights_written()

    def invalidate(self, reason: str) -> None:
        self._op(_INVALIDATE, reason)
        self.local.invalidate(reason)

    def fingerprint(self) -> Dict[str, torch.Tensor]:
        """The host node's first engine's (the engines hold the same weights between syncs)."""
        return self.local.fingerprint()

    def start_fingerprint(self) -> None:
        """The host node's engines digest now (the other nodes' do when they are asked to
        check)."""
        self.local.start_fingerprint()

    def check_fingerprint(self, expected, strict: bool = True) -> None:
        """Every node's engines against the host's fingerprints; the first failure named."""
        self._op(_CHECK, (dict(expected), strict))
        answers = [None] * (len(self.nodes) + 1)
        torch.distributed.gather_object(None, answers, dst=self.host, group=self.group)
        self.local.check_fingerprint(expected, strict)
        for node, answer in zip(self.nodes, answers[1:]):
            if answer is not None:
                raise WeightSyncError(f"node {node[:8]}: {answer}")

    def take_relayed_bytes(self) -> int:
        """Bytes sent to receivers since the last call (one sync's worth)."""
        out, self.bytes_relayed = self.bytes_relayed, 0
        return out

    def finish(self, ok: bool) -> None:
        """End the receivers' loop (ABORT when the host failed mid-sync: they drop the
        bucket they hold and wait for the next sync)."""
        self._op(_END if ok else _ABORT)


class RelayReceiver:
    """One remote node's receiver: takes the host's buckets into a shared-memory file of its
    node and has that node's engines load them (`local`: an EngineFanout over them). The file
    lives from the first bucket to `close`."""

    def __init__(self, local: EngineFanout, group, host_rank: int):
        self.local, self.group, self.host = local, group, host_rank
        self.path = shm_path(RELAY, os.getpid())
        self._region: Optional[SharedRegion] = None

    def _file(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        region = self._region
        if region is None or region.numel < numel or region.dtype != dtype:
            self._drop()
            region = self._region = SharedRegion(self.path, numel, dtype, create=True)
        return region.tensor

    def _drop(self) -> None:
        if self._region is not None:
            self._region.close()
            self._region = None

    def close(self) -> None:
        """Remove this node's file (the worker's shutdown: Ray runs no finalizers)."""
        self._drop()

    def start(self) -> None:
        """serve() in a thread: this rank may be sending its own shards meanwhile."""
        import threading

        self._error: Optional[BaseException] = None

        def run() -> None:
            try:
                self.serve()
            except BaseException as e:      # handed to join()
                self._error = e

        self._thread = threading.Thread(target=run, name="weight-relay", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error

    def serve(self) -> None:
        """One sync's worth of the host's messages; an engine's failure is kept and given
        back at the next check (the host names this node)."""
        failure: Optional[str] = None
        while True:
            code, payload = _recv_object(self.group, self.host)
            if code in (_END, _ABORT):
                if code == _ABORT:
                    self._drop()
                return
            try:
                if code == _BUCKET:
                    numel, dtype_name, entries = payload
                    dtype = getattr(torch, dtype_name.replace("torch.", ""))
                    target = self._file(numel, dtype)[:numel]
                    if device.weights_in_host_memory():   # straight into the node's file
                        torch.distributed.broadcast(target, src=self.host, group=self.group)
                    else:
                        buffer = torch.empty(numel, dtype=dtype, device=device.current_device())
                        torch.distributed.broadcast(buffer, src=self.host, group=self.group)
                        target.copy_(buffer.cpu())
                        del buffer
                    if failure is None:
                        self.local.load_weights_from_bucket(self.path, self._region.numel, dtype,
                                                          entries)
                elif code == _CHECK:
                    expected, strict = payload
                    if failure is None:
                        try:
                            self.local.check_fingerprint(expected, strict)
                        except WeightSyncError as e:
                            failure = str(e)
                    torch.distributed.gather_object(failure, None, dst=self.host,
                                                    group=self.group)
                    failure = None
                elif failure is None and code == _RELEASE:
                    self.local.release_bucket(None)
                elif failure is None and code == _WRITTEN:
                    self.local.weights_written()
                elif failure is None and code == _INVALIDATE:
                    self.local.invalidate(payload)
            except WeightSyncError as e:
                failure = str(e)


class RelayEnds(NamedTuple):
    """This rank's ends of the relay (`build_relay`)."""

    target: Optional[WeightTarget]        # the host's: its node's engines, and the relay
    relay: Optional[RelayTarget]          # the host's, when other nodes have engines
    receiver: Optional[RelayReceiver]     # the rank that receives for its node


def build_relay(engines: Sequence[Any], engine_nodes: Sequence[str], is_host: bool,
                active: bool) -> RelayEnds:
    """Collective over the actor's ranks: this rank's ends of the relay. `active`: this rank
    takes part in the sync. The host's target is an EngineFanout over its node's engines,
    wrapped in a RelayTarget when other nodes have engines."""
    infos: List[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(infos, (this_node(), active, is_host))
    rank_nodes = [node for node, _, _ in infos]
    host_rank = next(r for r, (_, _, host) in enumerate(infos) if host)
    active_ranks = [r for r, (_, on, _) in enumerate(infos) if on]
    plan = plan_relay(rank_nodes, engine_nodes, host_rank, active_ranks)
    ranks = [host_rank] + plan.group_ranks
    group = torch.distributed.new_group(ranks) if plan.receivers else None   # all ranks call
    rank = torch.distributed.get_rank()
    receiver = None
    if rank in plan.group_ranks:
        node = next(n for n, r in plan.receivers.items() if r == rank)
        local = EngineFanout([engines[i] for i in plan.remote_engines[node]],
                             plan.remote_engines[node])
        receiver = RelayReceiver(local, group, host_rank)
    if not is_host:
        return RelayEnds(None, None, receiver)
    local = EngineFanout([engines[i] for i in plan.local_engines], plan.local_engines)
    if not plan.receivers:
        return RelayEnds(local, None, receiver)
    order = sorted(plan.receivers, key=plan.receivers.get)
    relay = RelayTarget(local, group, host_rank, order)
    return RelayEnds(relay, relay, receiver)
