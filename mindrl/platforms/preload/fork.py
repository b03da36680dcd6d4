"""The forked side: what a fresh fork of a preload server does to become the program its client
asked for.

The fork takes the client's streams, environment, directory, arguments and signal handling,
then runs the script as `python SCRIPT ARGS` would; it dies with its client (a lifeline pipe).
An EXEC_ONLY kind's fork instead runs its script up to the os.execvp and hands that call back
for the client to make. Only the server calls this module, in the fork, after it has left the
server's loop (server.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
import runpy
import signal
import socket
import sys
import threading
from typing import Optional

from mindrl.platforms.preload.protocol import CLIENT_SIGNALS, send_message


def become_worker(request: dict, fds: list, added: list,
                  conn: Optional[socket.socket] = None) -> None:
    """Run the request in this fork: as its script (`added`: the directories its PYTHONPATH
    puts in front of the server's), or with `conn`, an EXEC_ONLY kind's, only up to its exec,
    whose call goes back on `conn` (the process then ends)."""
    if conn is not None:
        _work_out_exec(request, fds, conn)
    _run_worker(request, fds, added)


def _watch_lifeline(fd: int) -> None:
    """The client holds the only write end: when it dies, so does this worker."""
    def watch():
        while True:
            try:
                if not os.read(fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="preload-lifeline", daemon=True).start()


def _run_worker(request: dict, fds: list, added: list) -> None:
    """In the fork: take the client's streams, environment, directory, arguments and the
    directories its PYTHONPATH adds (with their sitecustomize), reseed what was seeded in the
    server, and run the script as `python SCRIPT ARGS` would."""
    os.setsid()
    for target, fd in zip((0, 1, 2), fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    os.set_inheritable(fds[3], False)
    _watch_lifeline(fds[3])
    os.environ.clear()
    os.environ.update(request["env"])
    if os.environ.get("PYTHONUNBUFFERED"):       # as `python -u`
        import io

        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            setattr(sys, name, io.TextIOWrapper(open(fd, "wb", buffering=0, closefd=False),
                                                encoding=stream.encoding, errors=stream.errors,
                                                write_through=True))
    os.chdir(request["cwd"])
    _start_signals(request.get("ignored_signals", []))
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.path[1:1] = added
    if added and "sitecustomize" not in sys.modules and \
            importlib.util.find_spec("sitecustomize") is not None:
        importlib.import_module("sitecustomize")
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    runpy.run_path(script, run_name="__main__")


def _start_signals(ignored: list) -> None:
    """As a fresh `python SCRIPT` started by the client: what the client ignored stays
    ignored; SIGINT raises KeyboardInterrupt (Python's own handler), the others act as the
    system's default."""
    for sig in CLIENT_SIGNALS:
        if int(sig) in ignored:
            signal.signal(sig, signal.SIG_IGN)
        elif sig == signal.SIGINT:
            signal.signal(sig, signal.default_int_handler)
        else:
            signal.signal(sig, signal.SIG_DFL)


class _ExecCall(Exception):
    def __init__(self, file: str, args: list):
        super().__init__(file)
        self.file, self.args = file, list(args)


def _work_out_exec(request: dict, fds: list, conn: socket.socket) -> None:
    """In an EXEC_ONLY kind's fork: run the script in the request's environment, directory
    and arguments up to its os.execvp, send that call and the environment it would have run
    with to the client, and end."""
    for fd in fds:
        os.close(fd)
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))

        def execvp(file, args):
            raise _ExecCall(file, args)

        os.execvp = execvp
        runpy.run_path(sys.argv[0], run_name="__main__")
        reply = {"why": f"{os.path.basename(sys.argv[0])} ended without an exec"}
    except _ExecCall as call:
        reply = {"exec": [call.file, call.args], "env": dict(os.environ)}
    except BaseException as exc:      # the client starts it plainly, where it fails visibly
        reply = {"why": f"{type(exc).__name__}: {exc}"}
    try:
        send_message(conn, reply)
    finally:
        os._exit(0)
