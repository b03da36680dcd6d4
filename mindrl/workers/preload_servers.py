"""Preload servers for the runs of one machine (mindrl/platforms/preload.py), one per kind:
the engines' and ranks' started with the environment the runs' Ray workers get
(worker_group.WORKER_ENV), the drivers' with this process's, so that their imports are the
ones a plain start would make; and the one for Ray's setup step of each worker, which a local
node started by a run uses (trainer/launch.py).

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
from typing import List

from mindrl.platforms import preload
from mindrl.workers.worker_group import WORKER_ENV


DRIVER = "driver"        # the kind whose processes are not Ray workers


def start(directory: Path) -> List:
    """One server per kind under `directory`, children of this process (they end with it),
    and `directory`/python, a scripts' interpreter forked from the driver's."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for kind in preload.WRAPPERS:
        preload.write_python_wrapper(directory, kind)
    return [preload.start_server(kind, Path(directory),
                                 dict(os.environ) if kind in (DRIVER, *preload.EXEC_ONLY) else
                                 {**os.environ, **WORKER_ENV})
            for kind in preload.PRELOADS]


def wait_ready(directory: Path, servers: List, timeout_s: float = 180.0) -> List[str]:
    """Wait until every kind's socket exists (its imports done) or its server ended, at most
    `timeout_s`: a worker asked for before then starts plainly, importing again what the
    server is importing at the same time. The kinds without a socket (ended or late)."""
    import time

    deadline = time.monotonic() + timeout_s
    servers = dict(zip(preload.PRELOADS, servers))
    missing = sorted(servers)
    while missing:
        missing = [kind for kind in servers if preload.socket_path(kind, str(directory)) is None]
        if time.monotonic() > deadline or all(servers[k].poll() is not None for k in missing):
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


if __name__ == "__main__":
    main(sys.argv[1])
