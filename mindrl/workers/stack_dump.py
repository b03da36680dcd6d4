"""Python stacks of the run's live processes, taken before a failed run tears them down.

`install` is Ray's worker_process_setup_hook for the run (trainer/launch.py): every Ray worker
process (ranks, rollout engines) registers faulthandler on SIGUSR1, writing every thread's
stack into a file of its own in a node-local directory (`dump_path(pid)`). `collect` signals
the members of a failed run and reads the stacks back: on the driver's node directly, on
another node through a small Ray task pinned to that node. Only a pid whose dump file exists is
signalled: SIGUSR1 ends a process that did not register the handler.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import tempfile
import time
from typing import Dict, Iterable, List, Optional

from mindrl.processes import pid_alive

DUMP_SIGNAL = signal.SIGUSR1
GONE = "(no stack: the process is gone)"
_open_files = []   # the registered file stays open for the life of the process


def dump_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"mindrl-stacks-{os.getuid()}")


def dump_path(pid: int) -> str:
    return os.path.join(dump_dir(), f"{pid}.txt")


def install() -> None:
    """Register this process's stack dump on SIGUSR1; drop files of processes now gone."""
    os.makedirs(dump_dir(), exist_ok=True)
    for name in os.listdir(dump_dir()):
        stem = name.split(".")[0]
        if stem.isdigit() and int(stem) != os.getpid() and not pid_alive(int(stem)):
            try:
                os.remove(os.path.join(dump_dir(), name))
            except OSError:
                pass
    handle = open(dump_path(os.getpid()), "w")
    _open_files.append(handle)
    faulthandler.register(DUMP_SIGNAL, file=handle, all_threads=True, chain=False)


def dump_here(pids: Iterable[int], settle_s: float = 1.0, limit_s: float = 8.0) -> Dict[int, str]:
    """Signal each pid of this node and read back what it wrote (or why there is nothing)."""
    offsets, out = {}, {}
    for pid in pids:
        path = dump_path(pid)
        if not pid_alive(pid):
            out[pid] = GONE
        elif not os.path.exists(path):
            out[pid] = "(no stack: the process registered no dump file on this node)"
        else:
            offsets[pid] = os.path.getsize(path)
            try:
                os.kill(pid, DUMP_SIGNAL)
            except ProcessLookupError:
                out[pid] = GONE
                del offsets[pid]
    start, sizes = time.monotonic(), {}
    while offsets and time.monotonic() - start < limit_s:   # until every file stops growing
        time.sleep(settle_s / 4)
        now = {pid: os.path.getsize(dump_path(pid)) for pid in offsets}
        if all(now[p] > offsets[p] for p in now) and now == sizes:
            break
        sizes = now
    for pid, offset in offsets.items():
        with open(dump_path(pid)) as f:
            f.seek(offset)
            text = f.read()
        out[pid] = text or "(no stack: the process did not answer the signal)"
    return out


def is_gone(stack: str) -> bool:
    """Whether `collect` found the process (or its node) gone."""
    return stack.startswith(GONE[:-1])


def collect(members: List[dict], timeout_s: float = 20.0) -> Dict[int, str]:
    """pid -> stack text of every member with a known pid (workers/deadline.py members):
    this node's directly, each other node's by a Ray task pinned to it (no CPU reserved, so it
    runs however busy the node is); a node that is gone or does not answer says so."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    by_node: Dict[Optional[str], List[int]] = {}
    for m in members:
        if m["pid"] is not None:
            by_node.setdefault(m["node"] or here, []).append(m["pid"])
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    out: Dict[int, str] = {}
    remote = {}
    for node, pids in by_node.items():
        if node == here:
            continue
        if node not in alive:
            out.update({pid: f"{GONE[:-1]} with its node {node})" for pid in pids})
            continue
        task = ray.remote(dump_here).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        remote[task.remote(pids)] = (node, pids)
    if here in by_node:
        out.update(dump_here(by_node[here]))
    if remote:
        ready, _ = ray.wait(list(remote), num_returns=len(remote), timeout=timeout_s)
        for ref, (node, pids) in remote.items():
            try:
                out.update(ray.get(ref, timeout=0) if ref in ready else
                           {pid: f"(no stack: node {node} did not answer)" for pid in pids})
            except ray.exceptions.TaskUnschedulableError:   # Ray knows the node is gone
                out.update({pid: f"{GONE[:-1]} with its node {node})" for pid in pids})
            except Exception as e:
                out.update({pid: f"(no stack: {type(e).__name__} on node {node})"
                            for pid in pids})
    return out
