"""`make test`: the suite's phases, shell commands run in a row until one fails, with the test
session's environment (support/session_env.py) and one set of preload servers for all of them
(mindrl/workers/preload_servers.py), instead of a set per pytest process: both xdist workers
and the `alone` phase fork their runs' workers from the same servers, which import once (about
25 CPU-s a set) and are ready before the `alone` phase begins.

    python tests/support/suite.py 'pytest ... -m "not alone"' 'pytest ... -m alone'

Exits with the first failing command's status. A start the servers refused is noted in
plain_starts.log under their directory, which is then kept and named at the end.
MINDRL_PRELOAD=0 runs the commands without servers."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `support.`

from support import session_env  # noqa: E402

session_env.apply()     # before the servers start: they import with what the tests carry


def run(commands) -> int:
    if os.environ.get("MINDRL_PRELOAD") == "0":
        return _in_a_row(commands)
    from mindrl.platforms import preload
    from mindrl.workers import preload_servers

    directory = Path(tempfile.mkdtemp(prefix="mindrl-preload-"))
    servers = preload_servers.start(directory)
    os.environ[preload.PRELOAD_DIR_ENV] = str(directory)
    try:
        return _in_a_row(commands)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
        log = directory / preload.PLAIN_STARTS
        if log.exists():
            starts = len(log.read_text().splitlines())
            print(f"preload servers: {starts} plain start(s), why in {log}", flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _in_a_row(commands) -> int:
    for command in commands:
        code = subprocess.call(command, shell=True)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
