"""Preload servers for the runs of one machine (mindrl/platforms/preload/), one per kind:
the engines' and ranks' started with the environment the runs' Ray workers get
(worker_group.WORKER_ENV), the drivers' with this process's, so that their imports are the
ones a plain start would make; and the two for a local Ray node's own Python processes (each
worker's setup step; the dashboard's API server and the monitors), which a node started by a
run uses (trainer/launch.py), the latter with the environment such a run starts it with.

    .venv/bin/python -m mindrl.workers.preload_servers /tmp/mindrl-preload &
    export MINDRL_PRELOAD_DIR=/tmp/mindrl-preload

Runs started afterwards from that shell fork their engines and ranks from the servers, and
`/tmp/mindrl-preload/python SCRIPT ARGS` is `python SCRIPT ARGS` forked from the driver's; the
servers stop with this command. The test suite starts them for its session (tests/conftest.py).
"""

import os
import signal
import sys
from pathlib import Path
from typing import List, Optional

from mindrl.platforms import preload
from mindrl.workers.worker_group import LOCAL_NODE_ENV, WORKER_ENV


DRIVER = "driver"        # the kind whose processes are not Ray workers


def start(directory: Path) -> List:
    """One server per kind under `directory`, children of this process (they end with it),
    and `directory`/python, a scripts' interpreter forked from the driver's."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for kind in preload.WRAPPERS:
        preload.write_python_wrapper(directory, kind)
    return [preload.start_server(kind, Path(directory), server_env(kind))
            for kind in preload.PRELOADS]


def server_env(kind: str) -> dict:
    """The environment `kind`'s server imports with: the one its requests will carry. Without
    the RAY_CLIENT_MODE=0 that `import ray` (in this process) set: the server's own import
    sets it, so requests match with it (an importer's children) and without (a shell's)."""
    mine = dict(os.environ)
    if mine.get("RAY_CLIENT_MODE") == "0":
        del mine["RAY_CLIENT_MODE"]
    if kind == "ray_node":          # a local node's processes: the driver's, as it starts one
        env = {**LOCAL_NODE_ENV, **mine}
        return {**env, **_ray_node_allocator(env)}
    if kind in (DRIVER, *preload.EXEC_ONLY):
        return mine
    return {**mine, **WORKER_ENV}


def wait_ready(directory: Path, servers: Optional[List],
               timeout_s: float = 180.0) -> List[str]:
    """Wait until every kind's socket exists (its imports done) or its server ended, at most
    `timeout_s`: a worker asked for before then starts plainly, importing again what the
    server is importing at the same time. `servers` None: started by another process, whose
    ending this one cannot see (the deadline alone bounds the wait). The kinds without a
    socket (ended or late)."""
    import time

    deadline = time.monotonic() + timeout_s
    servers = dict(zip(preload.PRELOADS, servers or [None] * len(preload.PRELOADS)))
    missing = sorted(servers)
    while missing:
        missing = [kind for kind in servers if preload.socket_path(kind, str(directory)) is None]
        ended = [k for k in missing if servers[k] is not None and servers[k].poll() is not None]
        if time.monotonic() > deadline or (missing and len(ended) == len(missing)):
            break
        time.sleep(0.1)
    return missing


def main(directory: str) -> None:
    servers = start(Path(directory))
    print(f"preload servers for {', '.join(preload.PRELOADS)} starting under {directory}; "
          f"export {preload.PRELOAD_DIR_ENV}={directory}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        for server in servers:
            server.wait()
    finally:
        for server in servers:
            server.terminate()


def _ray_node_allocator(env: dict) -> dict:
    """Ray starts its node's processes with its bundled jemalloc preloaded, unless LD_PRELOAD
    is set already (Ray 2.60's services.start_ray_process): what the server that forks them
    must run with. Drift from Ray's rule shows as refused starts in plain_starts.log
    (tests/workers/test_preload_servers.py)."""
    import importlib.util

    if env.get("LD_PRELOAD") is not None:
        return {}
    spec = importlib.util.find_spec("ray")
    bundled = os.path.join(list(spec.submodule_search_locations)[0], "core", "libjemalloc.so")
    path = env.get("RAY_JEMALLOC_LIB_PATH", bundled if os.path.exists(bundled) else None)
    if not path:
        return {}
    return {"LD_PRELOAD": path,
            "RAY_LD_PRELOAD_ON_WORKERS": env.get("RAY_LD_PRELOAD_ON_WORKERS", "0")}


if __name__ == "__main__":
    main(sys.argv[1])
