"""A process pool that runs jobs with a hard per-job timeout and never hangs: verifier jobs
(`VerifierPool`) and tool calls (mindrl/tools/runner.py) alike, one pool of one design.

A job kind is a setup function named "module:function" that each worker calls once at start;
it returns the worker's `run(job) -> (status, value, detail)`. The pool knows nothing else of
what a job is: it sends jobs, enforces deadlines, and replaces workers.

Why not concurrent.futures / multiprocessing.Pool: neither can kill the one worker stuck in a
sympy simplification (a pool's timeout abandons the result but the worker stays busy forever),
and a worker that dies breaks a ProcessPoolExecutor for good. Here each worker has its own pipe,
so the parent always knows which job a worker is on:

- jobs go out in chunks (few messages for many samples); a worker replies once per job;
- a job's clock starts when its worker can start it: at dispatch, or at the previous job's reply;
- past the deadline the worker is SIGKILLed, that one job scores 0 as a timeout, the rest of its
  chunk is requeued and a fresh worker is started; a worker that dies is handled the same way,
  as an error. Each kill settles one job, so a batch always finishes.

With `concurrency` > 1 (the tool pool; verifiers keep 1) a worker runs up to that many jobs at
once, each in a thread of its own, and the parent keeps that many in flight on it, sending
more as replies come back (in any order). Every job then has its own deadline, counted from
dispatch: a job that waits (a sleep, a network call, a sandbox child) no longer holds the jobs
behind it, so a batch of calls of which half sleep 1 s costs about 1 s, not half the batch in
seconds. A kind may gate some of its jobs (`run.gate(job)`: a semaphore the job holds while it
runs, e.g. at most one sandbox child per core): a job waiting at its gate tells the parent
("wait") and its clock starts when it gets through ("start"). Past a deadline the worker is
killed as above: every job past its own deadline is settled as a timeout, the others it was
running are sent again from the start (they lose what they had done, so a kind's jobs should
be safe to rerun). A worker that dies under several jobs cannot say which one killed it: they
are sent again, each to run alone on a worker, so the one that kills its worker again is the
one settled as an error; each kill still settles a job or isolates the jobs it interrupted,
so a batch always finishes.

Workers are started with "forkserver" (default) or "spawn", never plain fork: the trainer may
hold threads. With forkserver, a kind's slow imports (math-verify/sympy for verifiers) are made
once in the server, so replacing a killed worker costs a fork instead of seconds of imports.
The forkserver is one per process: the first pool that starts it chooses what it preloads.
"""

from __future__ import annotations

import logging
import importlib
import math
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from multiprocessing.connection import wait as wait_ready
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

logger = logging.getLogger(__name__)

OK, ERROR, TIMEOUT = "ok", "error", "timeout"

# A verifier job: (verifier name, completion, label, extra kwargs). Other kinds send any
# picklable object.
Job = Tuple[str, str, object, dict]

# What a worker's run function answers per job: (status, value, detail).
Reply = Tuple[str, Any, str]

VERIFIER_KIND = "mindrl.rewards.pool:verifier_setup"


class Outcome(NamedTuple):
    value: Any  # the job's answer; for verifiers a float, 0.0 unless status == OK
    status: str  # OK | ERROR | TIMEOUT
    detail: str = ""


# ----------------------------------------------------------------------------- worker side


def _worker_main(conn, kind: str, setup_args: tuple, memory_limit_mb: Optional[int],
                 concurrency: int = 1) -> None:
    """Worker entry point: set up the job kind once, then run job chunks until told to stop:
    one job after another, or with `concurrency` > 1 each job in a thread of its own."""
    os.environ["OMP_NUM_THREADS"] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    try:
        _die_with_parent()
        if memory_limit_mb:
            import resource

            limit = memory_limit_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        run = _resolve(kind)(*setup_args)
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    if concurrency > 1:
        _serve_concurrently(conn, run)
        return
    for job_id, job in _jobs(conn):
        conn.send((job_id, *_run_one(run, job)))


def _jobs(conn):
    """(job_id, job) of every chunk the parent sends, until it says stop or goes away."""
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        yield from chunk


def _serve_concurrently(conn, run: Callable[[Any], Reply]) -> None:
    """Each job of every chunk in a daemon thread of its own, started as it arrives (the parent
    never has more in flight than the pool's concurrency); replies go back as jobs finish.
    `run.gate(job)`, where the kind has one, names a semaphore the job must hold while it runs:
    a job that waits for it says so ("wait") and when it gets through ("start"), so that its
    deadline counts from its start."""
    send_lock = threading.Lock()
    gate = getattr(run, "gate", None)

    def send(message) -> None:
        with send_lock:
            conn.send(message)

    def one(job_id: int, job) -> None:
        try:
            slot = gate(job) if gate is not None else None
        except Exception:  # noqa: BLE001 - a gate's bug runs the job ungated
            slot = None
        try:
            if slot is not None and not slot.acquire(blocking=False):
                send(("wait", job_id))
                slot.acquire()
                send(("start", job_id))
            try:
                reply = _run_one(run, job)
            finally:
                if slot is not None:
                    slot.release()
            try:
                send((job_id, *reply))
            except (TypeError, AttributeError, ValueError, RecursionError) as exc:
                # an answer that does not pickle (nothing was written: pickling comes first)
                send((job_id, ERROR, None, "the answer cannot be sent: " + _short(exc)))
        except (OSError, EOFError):
            pass  # the parent is gone or closed the pipe: nobody waits for this answer

    for job_id, job in _jobs(conn):
        threading.Thread(target=one, args=(job_id, job), daemon=True,
                         name=f"job-{job_id}").start()


def _resolve(kind: str) -> Callable[..., Callable[[Any], Reply]]:
    module, _, name = kind.partition(":")
    return getattr(importlib.import_module(module), name)


def _run_one(run: Callable[[Any], Reply], job) -> Reply:
    try:
        return run(job)
    except Exception as exc:  # noqa: BLE001 - a kind's own bug fails the job, not the worker
        return ERROR, None, _short(exc)


def _short(exc: BaseException) -> str:
    # str(exc) of an arbitrary exception can itself be huge or slow: keep the type and a short
    # message only.
    msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
    return f"{type(exc).__name__}: {msg[:200]}"


def verifier_setup(imports: Tuple[str, ...]) -> Callable[[Job], Reply]:
    """The verifier kind: import math-verify and the verifiers once, score (name, completion,
    label, extra) jobs."""
    import math_verify  # noqa: F401  (the slow import, paid once per worker)

    # Its "timeout is disabled" warning is expected here: this pool is the timeout.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    import mindrl.rewards.builtin  # noqa: F401  (registers the built-in verifiers)

    from mindrl.rewards.user_modules import load_all

    load_all(imports)
    from mindrl.rewards.registry import get_verifier

    def run(job: Job) -> Reply:
        name, completion, label, extra = job
        return _run_job(get_verifier, name, completion, label, extra)

    return run


def _run_job(get_verifier, name, completion, label, extra) -> Reply:
    try:
        value = float(get_verifier(name)(completion, label, **(extra or {})))
        if not math.isfinite(value):
            raise ValueError(f"verifier returned non-finite score {value}")
        return OK, value, ""
    except Exception as exc:  # noqa: BLE001 - any verifier failure is a 0 score, not a crash
        return ERROR, 0.0, _short(exc)


def _die_with_parent() -> None:
    """Make a worker exit when the trainer dies (SIGKILL included), so no hung worker outlives it.

    Forkserver children: PR_SET_PDEATHSIG (Linux) kills us when the single-threaded forkserver
    exits, which it does once every holder of its "alive" pipe is gone. Each forked child
    inherits a copy of that pipe, so we close ours: otherwise a stuck worker would keep the
    forkserver, and so itself, alive. This works even while a C-level computation holds the GIL.
    Spawn children: the parent is the trainer, where PDEATHSIG would fire when the *thread* that
    started us exits, so a thread polls the parent pid instead (it needs the GIL, which a long
    big-integer operation can hold: prefer forkserver).
    """
    from multiprocessing import forkserver

    parent = os.getppid()
    server = getattr(forkserver, "_forkserver", None)  # private, hence the defensive getattr
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(alive_fd, int):  # set only in a child of the forkserver
        os.close(alive_fd)
        server._forkserver_alive_fd = None
        try:
            import ctypes

            if ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the forkserver died before prctl took effect
                    os._exit(0)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


# ----------------------------------------------------------------------------- parent side


class _Worker:
    __slots__ = ("proc", "conn", "ready", "jobs", "started", "alone")

    def __init__(self, proc, conn) -> None:
        self.proc = proc
        self.conn = conn
        self.ready = False
        # job ids sent and not answered yet, in the order sent -> each one's deadline (None:
        # not started: queued behind the job before it, or waiting at its gate)
        self.jobs: Dict[int, Optional[float]] = {}
        self.started = time.monotonic()
        self.alone = False  # running a job that must run by itself (_Batch.alone)

    def first_deadline(self) -> Optional[float]:
        return min((d for d in self.jobs.values() if d is not None), default=None)


class _Batch:
    """The jobs of every `map` running now (each call adds its own and waits for them)."""

    __slots__ = ("jobs", "results", "pending", "remaining", "alone", "error")

    def __init__(self) -> None:
        self.jobs: List[Any] = []
        self.results: List[Optional[Outcome]] = []
        self.pending: Deque[int] = deque()
        self.remaining = 0
        # jobs that were running together when their worker died: each runs alone from then
        # on, so that the one that kills a worker is known
        self.alone: Set[int] = set()
        self.error: Optional[BaseException] = None   # the driving call failed: all fail

    def add(self, jobs: Sequence[Any]) -> range:
        """Queue a call's jobs; their ids."""
        ids = range(len(self.jobs), len(self.jobs) + len(jobs))
        self.jobs.extend(jobs)
        self.results.extend([None] * len(jobs))
        self.pending.extend(ids)
        self.remaining += len(jobs)
        return ids

    def settle(self, job_id: int, outcome: Outcome) -> None:
        self.results[job_id] = outcome
        self.remaining -= 1


class WorkerPool:
    """`map(jobs) -> outcomes`, one Outcome per job, in order, for any job kind.

    Args:
        kind: "module:function" of the kind's setup, called once in each worker with
            `setup_args` (picklable); it returns `run(job) -> (status, value, detail)`.
            A run that raises settles its job as an ERROR; one that hangs or kills its
            worker, as a TIMEOUT or ERROR, and the worker is replaced.
        setup_args: what the setup receives.
        num_workers: worker processes.
        timeout: seconds one job may run before its worker is killed.
        concurrency: jobs one worker runs at once (1: one after another, in its main
            thread; more: each in a thread of its own, see the module docstring). The run
            function must then be thread-safe.
        mp_context: "forkserver" (cheap respawns) or "spawn".
        max_chunk: most jobs sent to a worker at once (fewer messages vs. load balance);
            with concurrency > 1 a worker is sent what fills its free places instead.
        startup_timeout: seconds a worker may take to set up before the pool gives up.
        memory_limit_mb: optional RLIMIT_AS per worker: a runaway allocation becomes a
            MemoryError (an error) instead of swapping the machine.
        preload: modules the forkserver imports once (if this pool is the one starting it).
        name: what the workers and the messages are called ("verifier", "tool").
    """

    def __init__(
        self,
        kind: str,
        setup_args: tuple = (),
        num_workers: int = 2,
        timeout: float = 10.0,
        mp_context: str = "forkserver",
        max_chunk: int = 16,
        startup_timeout: float = 120.0,
        memory_limit_mb: Optional[int] = None,
        preload: Sequence[str] = (),
        name: str = "job",
        concurrency: int = 1,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if mp_context not in ("forkserver", "spawn"):
            raise ValueError(
                f"mp_context must be 'forkserver' or 'spawn' (fork is unsafe), got {mp_context!r}"
            )
        self.name = name
        self.num_workers = num_workers
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.max_chunk = max(1, int(max_chunk))
        self.startup_timeout = float(startup_timeout)
        self.restarts = 0  # workers replaced after a timeout or crash, for monitoring
        self._kind = kind
        self._setup_args = tuple(setup_args)
        self._memory_limit_mb = memory_limit_mb
        self._ctx = mp.get_context(mp_context)
        if mp_context == "forkserver":
            # Takes effect only if this process has not started its forkserver yet.
            self._ctx.set_forkserver_preload(["__main__", kind.partition(":")[0], *preload])
        # Calls of `map` from several threads share the workers: each adds its jobs to the
        # running batch, and one of them at a time drives the pool (dispatch, wait, collect)
        # for all; a call arriving wakes the driver's wait (the wake pipe).
        self._cv = threading.Condition()
        self._batch: Optional[_Batch] = None
        self._driving = False
        self._wake_reader, self._wake_writer = self._ctx.Pipe(duplex=False)
        self._workers: List[_Worker] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)
        for _ in range(num_workers):
            self._workers.append(self._spawn())

    # -- public

    def map(self, jobs: Sequence[Any]) -> List[Outcome]:
        """Run all jobs; returns one Outcome per job, in order. Never raises for a bad job.
        Thread-safe: calls from several threads run their jobs at once on the workers."""
        with self._cv:
            if not self._finalizer.alive:
                raise RuntimeError(f"{type(self).__name__} is closed")
            if self._batch is None:
                self._batch = _Batch()
            batch = self._batch
            ids = batch.add(list(jobs))
            if self._driving:
                self._wake_writer.send_bytes(b"")

        def mine() -> bool:
            return all(batch.results[i] is not None for i in ids)

        while True:
            with self._cv:
                self._cv.wait_for(lambda: mine() or batch.error is not None
                                  or not self._driving)
                if batch.error is not None:
                    raise RuntimeError(f"the {self.name} pool failed in another call: "
                                       f"{batch.error!r}") from batch.error
                if mine():
                    return [batch.results[i] for i in ids]  # type: ignore[misc]
                self._driving = True
            try:
                self._drive(batch, mine)
            except BaseException as exc:
                with self._cv:
                    batch.error = exc
                raise
            finally:
                with self._cv:
                    self._driving = False
                    if self._batch is batch and (batch.remaining == 0 or batch.error):
                        self._batch = None
                    self._cv.notify_all()

    def _drive(self, batch: _Batch, mine: Callable[[], bool]) -> None:
        """Dispatch, wait and collect for every call's jobs until this call's are settled."""
        try:
            while True:
                with self._cv:
                    if mine():
                        return
                    self._dispatch(batch)
                self._wait()
                with self._cv:
                    while self._wake_reader.poll():
                        self._wake_reader.recv_bytes()
                    for i in range(len(self._workers)):
                        self._collect(i, batch)
                    self._enforce_deadlines(batch)
                    self._cv.notify_all()
        except BaseException:
            # Interrupted (Ctrl-C, an unpicklable job, ...): workers still busy with this
            # batch would answer into the next one, so replace them.
            if self._finalizer.alive:
                for i, w in enumerate(self._workers):
                    if w.jobs:
                        _kill(w)
                        self._workers[i] = self._spawn()
            raise

    def close(self) -> None:
        self._finalizer()

    def pids(self) -> List[int]:
        """The worker processes' ids now (a replaced worker's id changes)."""
        return [w.proc.pid for w in self._workers]

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self._kind, self._setup_args, self._memory_limit_mb,
                  self.concurrency),
            name=f"mindrl-{self.name}",
            daemon=True,
        )
        proc.start()
        child_conn.close()  # so the parent sees EOF when the worker dies
        return _Worker(proc, parent_conn)

    def _open(self, w: _Worker) -> bool:
        return w.ready and not w.alone and len(w.jobs) < self.concurrency

    def _dispatch(self, batch: _Batch) -> None:
        """Sequential workers (concurrency 1): an idle one gets a chunk, whose first job starts
        now and each next one at the previous one's reply. Concurrent ones: each gets enough to
        fill its free places (a fair share of what is pending), every job starting now."""
        sequential = self.concurrency == 1
        if not sequential:
            open_workers = sum(1 for w in self._workers if self._open(w))
            share = math.ceil(len(batch.pending) / max(1, open_workers))
        for i, w in enumerate(self._workers):
            if not batch.pending:
                return
            if not self._open(w):
                continue
            if sequential:
                size = min(self.max_chunk,
                           math.ceil(len(batch.pending) / (2 * self.num_workers)))
            else:
                size = min(self.concurrency - len(w.jobs), share)
            sent: List[int] = []
            while batch.pending and len(sent) < max(1, size):
                if batch.pending[0] in batch.alone:
                    if sent or w.jobs:
                        break
                    w.alone = True
                sent.append(batch.pending.popleft())
                if w.alone:
                    break
            if not sent:
                continue
            now = time.monotonic()
            for k, j in enumerate(sent):
                w.jobs[j] = now + self.timeout if (k == 0 or not sequential) else None
            try:
                w.conn.send([(j, batch.jobs[j]) for j in sent])
            except (OSError, EOFError):
                self._replace(i, batch, ERROR, "worker died before receiving jobs")

    def _wait(self) -> None:
        deadlines = [d for w in self._workers for d in w.jobs.values() if d is not None]
        now = time.monotonic()
        deadlines += [w.started + self.startup_timeout for w in self._workers if not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        handles = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
        wait_ready(handles + [self._wake_reader], timeout)

    def _collect(self, i: int, batch: _Batch) -> None:
        """Take every reply worker i has sent; replace it if it died."""
        w = self._workers[i]
        # Read exit status first: everything a dead worker wrote is then already in the pipe.
        dead = w.proc.exitcode is not None
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "fatal":
                    self.close()
                    raise RuntimeError(f"{self.name} worker failed to start:\n{msg[1]}")
                elif msg[0] == "wait":     # at its gate: its clock starts when it gets through
                    if msg[1] in w.jobs:
                        w.jobs[msg[1]] = None
                elif msg[0] == "start":
                    if msg[1] in w.jobs:
                        w.jobs[msg[1]] = time.monotonic() + self.timeout
                else:
                    job_id, status, value, detail = msg
                    # cannot happen with one pipe per worker
                    if job_id not in w.jobs or (self.concurrency == 1
                                                and next(iter(w.jobs)) != job_id):
                        raise RuntimeError(f"{self.name} worker replied out of order: {job_id}")
                    del w.jobs[job_id]
                    batch.settle(job_id, Outcome(value, status, detail))
                    if self.concurrency == 1 and w.jobs:   # the next job of its chunk starts
                        w.jobs[next(iter(w.jobs))] = time.monotonic() + self.timeout
                    if not w.jobs:
                        w.alone = False
        except (EOFError, OSError):
            dead = True  # after every reply it sent has been read
        if dead:
            if not w.ready:
                self.close()
                raise RuntimeError(
                    f"{self.name} worker exited with code {w.proc.exitcode} before it was ready"
                )
            self._replace(i, batch, ERROR, f"worker process died (exit code {w.proc.exitcode})")

    def _enforce_deadlines(self, batch: _Batch) -> None:
        now = time.monotonic()
        for i, w in enumerate(self._workers):
            deadline = w.first_deadline()
            if deadline is not None and now >= deadline:
                self._replace(i, batch, TIMEOUT, f"exceeded {self.timeout:g}s")
            elif not w.ready and now - w.started > self.startup_timeout:
                self.close()
                raise RuntimeError(f"{self.name} worker not ready after {self.startup_timeout:g}s")

    def _replace(self, i: int, batch: _Batch, status: str, detail: str) -> None:
        """Kill worker i, settle the job(s) it failed, requeue the rest, start a new one.

        A timeout settles every job past its own deadline. A death settles the one job that
        was running (a sequential worker's current job); a worker that died under several
        cannot say which, so they are requeued to run alone (`_Batch.alone`)."""
        w = self._workers[i]
        _kill(w)
        now = time.monotonic()
        running = [j for j, d in w.jobs.items() if d is not None]
        if status == TIMEOUT:
            failed = [j for j in running if w.jobs[j] <= now]
        elif len(running) > 1:
            failed = []
            batch.alone.update(running)
        else:
            failed = running or list(w.jobs)[:1]
        for j in failed:
            batch.settle(j, Outcome(0.0, status, detail))
        batch.pending.extendleft(reversed([j for j in w.jobs if j not in failed]))
        self.restarts += 1
        logger.warning("%s worker %d replaced: %s", self.name, w.proc.pid, detail)
        self._workers[i] = self._spawn()


class VerifierPool(WorkerPool):
    """`map(jobs) -> outcomes`, one Outcome per (verifier, completion, label, extra) job.

    Args:
        num_workers, timeout, mp_context, max_chunk, startup_timeout, memory_limit_mb: as
            WorkerPool's.
        worker_imports: modules (dotted names) or .py files each worker loads at start:
            those that register custom verifiers (the built-in ones are always imported;
            rewards/user_modules.py).
    """

    def __init__(
        self,
        num_workers: int = 2,
        timeout: float = 10.0,
        worker_imports: Sequence[str] = (),
        mp_context: str = "forkserver",
        max_chunk: int = 16,
        startup_timeout: float = 120.0,
        memory_limit_mb: Optional[int] = None,
    ) -> None:
        imports = tuple(worker_imports)
        super().__init__(
            VERIFIER_KIND,
            (imports,),
            num_workers=num_workers,
            timeout=timeout,
            mp_context=mp_context,
            max_chunk=max_chunk,
            startup_timeout=startup_timeout,
            memory_limit_mb=memory_limit_mb,
            preload=["math_verify", "mindrl.rewards.builtin",
                     *(m for m in imports if not m.endswith(".py"))],
            name="verifier",
        )


def _kill(w: _Worker) -> None:
    if w.proc.exitcode is None:
        w.proc.kill()
    w.proc.join(timeout=5)
    w.conn.close()


def _shutdown(workers: List[_Worker]) -> None:
    """Ask idle workers to exit, kill whatever is left (a worker may be mid-job)."""
    for w in workers:
        try:
            if not w.jobs:
                w.conn.send(None)
        except (OSError, EOFError):
            pass
    deadline = time.monotonic() + 1.0
    for w in workers:
        w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
        _kill(w)
    workers.clear()
