"""Ray workers forked from a process that has already imported what they import.

Every rollout engine and Megatron rank is a fresh Python process that imports torch, vLLM or
Megatron before it does any work: about 15 CPU-s for an engine and 5-6 for a rank on a 2-core
box, more than the steps of a short run. A preload server imports one kind's libraries once
(`PRELOADS`), then forks a worker for every request of `preload_client.py`, the
`py_executable` that a worker's Ray runtime_env names (`runtime_env`); the fork runs Ray's own
worker script with the requesting process's arguments, environment, directory and streams.
The worker is a real Ray worker; only its imports were done before it was born. A script run
as `python preload_client.py SOCKET SCRIPT ARGS` (the tests' training drivers) is the same
script with the same arguments, born the same way.

Forking is safe for the same reasons as the engines' forked TP workers
(platforms/cpu/vllm_start.py): the server runs one thread and never a parallel region, and it
never initialises a device or Ray. Imports that read the environment read the server's, so
the server refuses (and the client starts plainly) a request whose environment differs from
its own in any variable those libraries read at import (`IMPORT_TIME_ENV`). A PYTHONPATH that
only puts directories in front of the server's is taken when nothing the server imported could
have come from them (`shadowed`): the worker gets them on its path and, as an interpreter
starting with them would, imports the `sitecustomize` they hold (a test's hook).

Used where MINDRL_PRELOAD_DIR names a directory with a server's socket per kind (`serve`
writes `<kind>.sock`); the test suite starts one per kind for its whole session.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import random
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Dict, Optional

PRELOAD_DIR_ENV = "MINDRL_PRELOAD_DIR"
PLAIN_STARTS = "plain_starts.log"     # beside the sockets: each start that fell back, and why
CLIENT = Path(__file__).with_name("preload_client.py")
# The signals a client forwards to its worker, and whose handling the worker takes from the
# client rather than from the server (which may have been started with any of them ignored,
# or with handlers of its own).
CLIENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGUSR2)
# What each kind of worker imports before its first call (module names, in order).
PRELOADS = {
    "vllm": ("torch", "transformers", "vllm.entrypoints.llm", "vllm.v1.engine.core",
             "vllm.v1.worker.cpu_worker", "vllm.model_executor.models.qwen2",
             "vllm.model_executor.models.qwen3"),
    # (torch._dynamo: the optimizer's constructor imports it, 0.7 CPU-s; mindrl.config: the
    # worker's own import, with Hydra's)
    "megatron": ("torch", "transformers", "mindrl.rank_imports", "torch._dynamo",
                 "mindrl.config"),
    # a run's driver (cli/train_grpo.py), where a test or script starts many: no pyplot (the
    # driver picks its backend first)
    "driver": ("torch", "transformers", "transformers.models.auto.tokenization_auto", "hydra",
               "hydra.utils", "omegaconf", "math_verify", "torch.utils.tensorboard",
               "matplotlib", "matplotlib.figure", "ray", "ray.util.placement_group",
               "ray.dashboard.optional_deps"),
    # Ray's setup step, run before every worker that has a runtime_env (all of a run's): it
    # imports Ray (about 0.8 CPU-s) only to read the runtime_env and exec the worker.
    "ray_setup": ("ray._private.workers.setup_worker",),
    # The Python processes of a local Ray node's head besides its workers and agents (the
    # dashboard's API server, the log monitor, the autoscaler's monitor): Ray and its
    # dashboard's imports, about 0.7-0.9 CPU-s each. (The agents, started by the raylet, take
    # the raylet for dead unless it is their parent: they start plainly.)
    "ray_node": ("ray.dashboard.dashboard", "ray._private.log_monitor",
                 "ray.autoscaler._private.monitor"),
}
RAY_NODE_SCRIPTS = ("dashboard/dashboard.py", "_private/log_monitor.py",
                    "autoscaler/_private/monitor.py")
# The only scripts a kind's server forks (others start plainly, noted): an EXEC_ONLY kind's
# one, a node's processes.
ONLY_SCRIPTS = {"ray_setup": ("setup_worker.py",), "ray_node": RAY_NODE_SCRIPTS}
# Kinds that import Ray: their forks are never a Ray worker (a driver connects as one, EXEC_ONLY
# execs, a node's process never connects).
RAY_IMPORTING = ("driver", "ray_setup", "ray_node")
# Variables compared besides IMPORT_TIME_ENV, by kind: Ray's modules read RAY_ ones at import.
KIND_IMPORT_TIME_ENV = {"ray_node": ("RAY_",), "driver": ("RAY_",)}
# Kinds whose forks only work out what to exec next, and the one script they run: the fork
# runs it until it calls os.execvp and sends back that call and its environment, which the
# client execs itself (it stays the process its starter watches). Nothing the server imported
# outlives the exec, so such a server may import Ray and takes any environment.
EXEC_ONLY = {"ray_setup": "setup_worker.py"}
# The interpreters `write_python_wrapper` leaves beside the sockets, by kind; ray_setup's is
# the interpreter of a local node's processes (`ray_node_python`).
WRAPPERS = {"driver": "python", "ray_setup": "python-ray-node"}
# What each kind then calls once (`module:function`), so that no worker repeats it: vLLM's
# sampler helper compiled for any vocabulary (engines/vllm_warm.py), with it torch inductor's
# list of this machine's vector instruction sets (4 probe processes); vLLM's CPU kernel
# overrides registered.
WARM_UPS = {"vllm": ("torch._inductor.cpu_vec_isa:valid_vec_isa_list",
                     "mindrl.engines.vllm_warm:compile_sampler_helpers",
                     "mindrl.engines.vllm_warm:register_kernel_overrides")}
WARM_THREADS_S = 30.0   # how long the warm-ups' passing threads (a compile's) may take to end
# Environment variables (by prefix) that these libraries may read while they import: a
# request must carry the server's values for every one of them.
IMPORT_TIME_ENV = ("VLLM_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "CUDA", "HF_",
                   "TRANSFORMERS", "TOKENIZERS", "PYTHON", "LD_", "NVTE_", "TRITON", "MEGATRON",
                   "NCCL", "GLOO", "MINDRL_DEVICE")
# ... except these, which vLLM's import sets in whatever process imports it (a driver, a test
# process) and that process's children inherit: torch reads the inductor ones when it compiles
# (a CPU worker never does) and NVML's check when it looks for CUDA; Triton and TileLang are
# absent on CPU; the loader reads LD_LIBRARY_PATH when a process starts (vLLM adds OpenCV's
# bundled libraries to it), which a fork never does. Ray's driver sets PYTHONBREAKPOINT, read
# at each breakpoint(); the collective backends read their interface when a group is made; no
# interpreter reads a variable named PYTHON (scripts name an interpreter with it), and no
# Hugging Face library reads HF_DIR or HF_OUT_DIR (examples/ckpt's scripts' own folders).
USE_TIME_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS",
                "PYTORCH_NVML_BASED_CUDA_CHECK", "TRITON_CACHE_AUTOTUNING",
                "TILELANG_CLEANUP_TEMP_FILES", "LD_LIBRARY_PATH", "PYTHONBREAKPOINT",
                "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "PYTHON", "HF_DIR", "HF_OUT_DIR",
                "PYTHONUNBUFFERED", "RAY_ADDRESS")
# (PYTHONUNBUFFERED, read at an interpreter's start: a fork makes its streams write through;
# RAY_ADDRESS, read by ray.init.)


def _socket_file(directory, kind: str) -> Path:
    return Path(directory) / f"{kind}.sock"


def socket_path(kind: str, directory: Optional[str] = None) -> Optional[Path]:
    """This kind's server socket under MINDRL_PRELOAD_DIR (or `directory`), if one listens."""
    directory = directory or os.environ.get(PRELOAD_DIR_ENV)
    if not directory:
        return None
    path = _socket_file(directory, kind)
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
        return f'exec "{sys.executable}" "{CLIENT}" "{_socket_file(directory, of_kind)}" "$@"'

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


def _import_env(env: Dict[str, str], extra: tuple = ()) -> Dict[str, str]:
    prefixes = IMPORT_TIME_ENV + tuple(extra)
    return {k: v for k, v in env.items() if k.startswith(prefixes) and k not in USE_TIME_ENV}


def _differences(before: Dict[str, str], after: Dict[str, str],
                 theirs: Dict[str, str]) -> list:
    """Variables whose value in a request is not what this server's imports saw: the value
    before the imports, or for one the imports set themselves, the value they set (a worker
    started with it set imports as this server did)."""
    return sorted(k for k in set(before) | set(after) | set(theirs)
                  if theirs.get(k) != before.get(k)
                  and not (before.get(k) != after.get(k) and theirs.get(k) == after.get(k)))


PATH_ENV = "PYTHONPATH"


def added_path(mine: Optional[str], theirs: Optional[str]) -> Optional[list]:
    """The directories a request's PYTHONPATH puts in front of this server's, or None when it
    is not this server's with directories added in front."""
    mine_dirs = [d for d in (mine or "").split(os.pathsep) if d]
    their_dirs = [d for d in (theirs or "").split(os.pathsep) if d]
    kept = len(their_dirs) - len(mine_dirs)
    if kept < 0 or their_dirs[kept:] != mine_dirs:
        return None
    return their_dirs[:kept]


def shadowed(directories, imported) -> list:
    """Entries of `directories` named like a top-level module in `imported` (or a
    `usercustomize`, which this helper never imports): what a fresh interpreter would have
    imported from there instead of what the server did."""
    names = set(imported) | {"usercustomize"}
    found = set()
    for directory in directories:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        found.update(f"{directory}/{entry}" for entry in entries
                     if entry.split(".")[0] in names)
    return sorted(found)


def framed(message: dict) -> bytes:
    """One message: its JSON's length (4 bytes, network order), then the JSON."""
    body = json.dumps(message).encode()
    return struct.pack("!I", len(body)) + body


def send_message(conn: socket.socket, message: dict) -> None:
    conn.sendall(framed(message))


def _read_exactly(conn: socket.socket, size: int, start: bytes = b"") -> bytes:
    data = start
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise EOFError("the other side closed the connection")
        data += part
    return data


def read_message(conn: socket.socket) -> dict:
    (size,) = struct.unpack("!I", _read_exactly(conn, 4))
    return json.loads(_read_exactly(conn, size))


def _receive_request(conn: socket.socket):
    """The client's request: its JSON and the four descriptors (stdin, stdout, stderr, lifeline)."""
    conn.settimeout(10.0)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
    head = _read_exactly(conn, 4, data[:4])
    (size,) = struct.unpack("!I", head)
    body = _read_exactly(conn, size, data[4:])
    conn.settimeout(None)
    return json.loads(body), fds


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
        self.env_prefixes = KIND_IMPORT_TIME_ENV.get(kind, ())
        self.env_before = _import_env(env_before, self.env_prefixes)
        self.env_after = _import_env(dict(os.environ), self.env_prefixes)
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
            request, fds = _receive_request(conn)
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
        added = added_path(self.env_before.get(PATH_ENV), env.get(PATH_ENV))
        differs = [k for k in _differences(self.env_before, self.env_after,
                                           _import_env(env, self.env_prefixes))
                   if not (k == PATH_ENV and added is not None)]
        if differs:
            values = "; ".join(f"{k} {self.env_before.get(k)!r} vs {env.get(k)!r}"
                               for k in differs)
            return f"environment differs in {', '.join(differs)}: {values}", None
        hidden = shadowed(added, {name.split(".")[0] for name in sys.modules})
        if hidden:
            return (f"{PATH_ENV} adds what this server imported from elsewhere: "
                    f"{', '.join(hidden)}", None)
        return self._thread_refusal(), added

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


def start_server(kind: str, directory: Path, env: Dict[str, str], modules=()):
    """A preload server for `kind` at DIRECTORY/<kind>.sock, ready once the socket exists
    (workers asked for before then start plainly); it exits when this process does."""
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "mindrl.platforms.preload", kind,
                             str(directory), *modules], env=env, stdin=subprocess.DEVNULL)


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
    parent exits. The socket appears under its name only once the imports are done."""
    path = _socket_file(directory, kind)
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
        if become.conn is not None:
            _work_out_exec(become.request, become.fds, become.conn)
        _run_worker(become.request, become.fds, become.added_path)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3:])
