"""The preload server: import one kind's libraries once, then fork a worker per client request.

Forking is safe for the same reasons as the engines' forked TP workers
(platforms/cpu/vllm_start.py): the server runs one thread and never a parallel region, and it
never initialises a device or Ray. A request whose environment would not have imported what the
server did starts plainly (environment.py); what the fork then does is fork.py's. Started as
`python -m mindrl.platforms.preload KIND DIRECTORY` (`preload.start_server`).
"""

from __future__ import annotations

import gc
import importlib
import os
import selectors
import socket
import sys
from pathlib import Path
from typing import Dict, Optional

from mindrl.platforms.preload.environment import ImportTimeEnv
from mindrl.platforms.preload.fork import become_worker
from mindrl.platforms.preload.kinds import (EXEC_ONLY, KIND_IMPORT_TIME_ENV, ONLY_SCRIPTS,
                                            PRELOADS, RAY_IMPORTING, WARM_UPS)
from mindrl.platforms.preload.protocol import receive_request, send_message, socket_file

WARM_THREADS_S = 30.0   # how long the warm-ups' passing threads (a compile's) may take to end


class _BecomeWorker(Exception):
    """Raised in a fresh fork to leave the server's loop (and every frame of it) before the
    worker's script runs, so the worker exits as a plain interpreter does."""

    def __init__(self, request: dict, fds: list, added_path: list, conn=None):
        super().__init__("become a worker")
        self.request, self.fds, self.added_path = request, fds, added_path
        self.conn = conn        # an EXEC_ONLY kind's: where the exec call goes back


class Server:
    """Accepts requests on a Unix socket, forks a worker per request, reports each exit."""

    def __init__(self, path: Path, env_before: Dict[str, str], kind: str = ""):
        self.path = path
        self.exec_only = EXEC_ONLY.get(kind)   # the one script an EXEC_ONLY kind runs
        self.scripts = ONLY_SCRIPTS.get(kind)
        self.import_env = ImportTimeEnv(env_before, KIND_IMPORT_TIME_ENV.get(kind, ()))
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if path.exists():
            path.unlink()
        self.listener.bind(str(path))
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.owner = os.pidfd_open(os.getppid())   # the server ends with whoever started it
        self.selector.register(self.owner, selectors.EVENT_READ, "owner")
        self.workers: Dict[int, tuple] = {}         # pidfd -> (pid, client connection)

    def loop(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    self._accept()
                elif key.data == "owner":
                    self.path.unlink(missing_ok=True)
                    return
                else:
                    self._reap(key.fd)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = receive_request(conn)
        except (OSError, EOFError, ValueError):
            conn.close()
            return
        why, added = self._script_refusal(request["argv"]), []
        if why is None:     # an EXEC_ONLY kind's fork takes the request's environment whole
            why, added = ((self._thread_refusal(), []) if self.exec_only
                          else self._refusal(request["env"]))
        if why:
            for fd in fds:
                os.close(fd)
            send_message(conn, {"why": why})
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            self.listener.close()
            os.close(self.owner)
            for pidfd, (_, client) in self.workers.items():
                os.close(pidfd)
                if client is not None:
                    client.close()
            if self.exec_only:
                raise _BecomeWorker(request, fds, [], conn)
            conn.close()
            raise _BecomeWorker(request, fds, added)
        for fd in fds:
            os.close(fd)
        if self.exec_only:          # the fork answers; only its exit is ours to collect
            conn.close()
            conn = None
        else:
            send_message(conn, {"pid": pid})
        pidfd = os.pidfd_open(pid)
        self.workers[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ, "worker")

    def _script_refusal(self, argv: list) -> Optional[str]:
        """Why a script this kind does not fork (ONLY_SCRIPTS) must start plainly, or None."""
        script = "/" + argv[0] if argv else ""
        if self.scripts is None or script.endswith(tuple("/" + s for s in self.scripts)):
            return None
        verb = "forks" if len(self.scripts) == 1 else "fork"
        return f"only {', '.join(self.scripts)} {verb} from this server"

    def _refusal(self, env: Dict[str, str]):
        """(why this request must start plainly or None, the directories its PYTHONPATH adds)."""
        why, added = self.import_env.refusal(env)
        return (why, None) if why else (self._thread_refusal(), added)

    @staticmethod
    def _thread_refusal() -> Optional[str]:
        threads = len(os.listdir("/proc/self/task"))     # native ones too (a thread pool)
        return f"the server runs {threads} threads" if threads != 1 else None

    def _reap(self, pidfd: int) -> None:
        pid, conn = self.workers.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        message = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                   else {"exit": os.waitstatus_to_exitcode(status)})
        if conn is None:
            return
        try:
            send_message(conn, message)
        except OSError:
            pass
        conn.close()


class _NoRay:
    """A meta-path finder that refuses `ray` and remembers who asked.

    Ray's C++ core reads its settings, the worker's job id among them, from the environment
    once, when `ray._raylet` loads: loaded here, every worker would carry the server's (none)
    and abort at start. vLLM imports Ray optionally (`try: import ray`); the modules that
    tried are forgotten after the preload, so a worker imports them afresh, with Ray."""

    def __init__(self):
        self.askers = set()

    def find_spec(self, name, path=None, target=None):
        if name != "ray" and not name.startswith("ray."):
            return None
        frame = sys._getframe(1)
        while frame is not None:
            asker = frame.f_globals.get("__name__", "")
            if not asker.startswith(("importlib", "_frozen_importlib")):
                self.askers.add(asker)
                break
            frame = frame.f_back
        raise ModuleNotFoundError(f"{name} is imported by each worker, never by the preload "
                                  "server", name=name)


def _import_without_ray(modules) -> None:
    blocker = _NoRay()
    sys.meta_path.insert(0, blocker)
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        sys.meta_path.remove(blocker)
    for asker in blocker.askers:
        sys.modules.pop(asker, None)


def _until_one_thread(timeout_s: float) -> None:
    """Wait (at most `timeout_s`) for threads an import or warm-up left running to end: a
    request that finds more than one is started plainly. tqdm's monitor thread, started by a
    compile's progress bar, runs until told to stop: told here (a fork's first bar starts its
    own)."""
    import time

    tqdm = sys.modules.get("tqdm")
    monitor = getattr(getattr(tqdm, "tqdm", None), "monitor", None)
    if monitor is not None:
        monitor.exit()
        tqdm.tqdm.monitor = None
    deadline = time.monotonic() + timeout_s
    while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)


def serve(kind: str, directory: str, modules=None) -> None:
    """Import `kind`'s libraries (or `modules`), then serve at DIRECTORY/<kind>.sock until our
    parent exits. The socket appears under its name only once the imports are done. In each
    fork this returns only once the worker's script has run."""
    path = socket_file(directory, kind)
    env = dict(os.environ)      # what the imports see (some of them add to it)
    if kind in RAY_IMPORTING:   # no fork of theirs is a Ray worker
        for name in modules or PRELOADS[kind]:
            importlib.import_module(name)
    else:
        _import_without_ray(modules or PRELOADS[kind])
    for call in () if modules else WARM_UPS.get(kind, ()):
        module, function = call.split(":")
        getattr(importlib.import_module(module), function)()
    _until_one_thread(WARM_THREADS_S)
    gc.freeze()     # every worker forks with this heap: its collections pass over none of it
    try:
        server = Server(path.with_suffix(".binding"), env, kind)
        server.path = server.path.rename(path)
        server.loop()
    except _BecomeWorker as become:
        become_worker(become.request, become.fds, become.added_path, become.conn)
