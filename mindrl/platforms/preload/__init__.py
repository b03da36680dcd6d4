"""Ray workers forked from a process that has already imported what they import.

Every rollout engine and Megatron rank is a fresh Python process that imports torch, vLLM or
Megatron before it does any work: about 15 CPU-s for an engine and 5-6 for a rank on a 2-core
box, more than the steps of a short run. A preload server imports one kind's libraries once
(kinds.PRELOADS), then forks a worker for every request of `client.py`, the `py_executable`
that a worker's Ray runtime_env names (`runtime_env`); the fork runs Ray's own worker script
with the requesting process's arguments, environment, directory and streams. The worker is a
real Ray worker; only its imports were done before it was born. A script run as
`python client.py SOCKET SCRIPT ARGS` (the tests' training drivers) is the same script with the
same arguments, born the same way.

This module is what a run's processes call: find a kind's server, route an actor or a script
to it, start one. The rest, one job each: kinds.py (what each kind imports and forks),
protocol.py (what client and server exchange), environment.py (which requests a server may
fork), server.py (the server's loop, `python -m mindrl.platforms.preload`), fork.py (what the
fork does to become the requested program), client.py (the process that asks and stands in).

Used where MINDRL_PRELOAD_DIR names a directory with a server's socket per kind
(`<kind>.sock`); the test suite starts one per kind for its whole session.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Dict, Optional

# (PRELOADS, WRAPPERS, EXEC_ONLY, PLAIN_STARTS: what starters of servers and readers of their
# notes name, here with the rest of what they call)
from mindrl.platforms.preload.kinds import EXEC_ONLY, PRELOADS, RAY_NODE_SCRIPTS, WRAPPERS
from mindrl.platforms.preload.protocol import PLAIN_STARTS, socket_file

__all__ = ["CLIENT", "EXEC_ONLY", "PLAIN_STARTS", "PRELOADS", "PRELOAD_DIR_ENV", "WRAPPERS",
           "python_wrapper", "ray_node_python", "runtime_env", "socket_path", "start_server",
           "write_python_wrapper"]

PRELOAD_DIR_ENV = "MINDRL_PRELOAD_DIR"
CLIENT = Path(__file__).with_name("client.py")


def socket_path(kind: str, directory: Optional[str] = None) -> Optional[Path]:
    """This kind's server socket under MINDRL_PRELOAD_DIR (or `directory`), if one listens."""
    directory = directory or os.environ.get(PRELOAD_DIR_ENV)
    if not directory:
        return None
    path = socket_file(directory, kind)
    return path if path.exists() else None


def write_python_wrapper(directory, kind: str) -> Path:
    """DIRECTORY/<WRAPPERS[kind], else python>, an executable that runs `python SCRIPT ARGS`
    as a fork of `kind`'s server (its client falls back to the plain interpreter, noting why):
    for whatever takes an interpreter by path, as the example scripts' PYTHON does. The
    ray_setup kind's wrapper is a Ray node's interpreter: it sends the setup step there, the
    node's RAY_NODE_SCRIPTS (`-u` becomes PYTHONUNBUFFERED) to the ray_node server, and runs
    the rest (the agents, the reaper) plainly."""
    path = Path(directory) / WRAPPERS.get(kind, "python")

    def client(of_kind):
        return f'exec "{sys.executable}" "{CLIENT}" "{socket_file(directory, of_kind)}" "$@"'

    forked = client(kind)
    if kind in EXEC_ONLY:
        node = "|".join(f"*/{script}" for script in RAY_NODE_SCRIPTS)
        forked = "\n".join((
            'if [ "$1" = -u ]; then',
            f'  case "$2" in {node}) shift; export PYTHONUNBUFFERED=1; {client("ray_node")};; esac',
            'fi',
            f'case "$1" in */{EXEC_ONLY[kind]}) {forked};; {node}) {client("ray_node")};; esac',
            f'exec "{sys.executable}" "$@"'))
    partial = path.with_suffix(".partial")
    partial.write_text(f"#!/bin/sh\n{forked}\n")
    partial.chmod(0o755)
    partial.rename(path)
    return path


def python_wrapper(directory: Optional[str] = None, kind: str = "driver") -> Optional[Path]:
    """The wrapper `write_python_wrapper` left for `kind` under MINDRL_PRELOAD_DIR (or
    `directory`)."""
    directory = directory or os.environ.get(PRELOAD_DIR_ENV)
    path = Path(directory) / WRAPPERS.get(kind, "python") if directory else None
    return path if path is not None and path.exists() else None


@contextlib.contextmanager
def ray_node_python():
    """Ray starts its node's Python processes with sys.executable, and every worker with a
    runtime_env through its setup step (EXEC_ONLY): while a local node starts inside this
    block, sys.executable is the ray_setup wrapper where its server listens, so that step
    and the node's RAY_NODE_SCRIPTS fork, and its agents start plainly as before."""
    wrapper = python_wrapper(kind="ray_setup")
    if wrapper is None or socket_path("ray_setup") is None:
        yield
        return
    interpreter, sys.executable = sys.executable, str(wrapper)
    try:
        yield
    finally:
        sys.executable = interpreter


def runtime_env(kind: str, env_vars: Dict[str, str]) -> dict:
    """A Ray actor's runtime_env: its environment, and the preloaded start where a server for
    `kind` listens."""
    result = {"env_vars": env_vars}
    path = socket_path(kind)
    if path is not None:
        result["py_executable"] = f"{sys.executable} {CLIENT} {path}"
    return result


def start_server(kind: str, directory: Path, env: Dict[str, str], modules=()):
    """A preload server for `kind` at DIRECTORY/<kind>.sock, ready once the socket exists
    (workers asked for before then start plainly); it exits when this process does."""
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "mindrl.platforms.preload", kind,
                             str(directory), *modules], env=env, stdin=subprocess.DEVNULL)
