"""`ToolRunner`: the tools of a run, their calls answered through the shared worker pool.

A call is (name, arguments), the arguments a JSON object or its text, exactly as a tool
format parsed them from the model's turn. Everything the model writes is bad input too: a
malformed call, an unknown name, arguments of the wrong type are answered as errors here,
before any worker is asked; what a tool does wrong (raises, runs past its deadline, kills its
worker) is answered from the pool. Every answer is cut to the response limit with a marker.
Nothing raises for a bad call: the episode goes on.

    with ToolRunner(["calculator", "python"], ToolLimits(timeout_s=5)) as tools:
        results = tools.call_many([("calculator", '{"expression": "2+3*4"}')])
        results[0].text   # "14"
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mindrl.rewards.pool import ERROR, OK, TIMEOUT, WorkerPool

from . import sandbox, worker
from .errors import SandboxUnavailable
from .limits import ToolLimits
from .registry import BUILTIN, Tool, resolve_all
from .schema import ArgumentError, check_arguments

logger = logging.getLogger(__name__)

GRACE_S = 1.0   # an in-process tool's worker is killed this long after the call's deadline
# Calls one pool worker runs at once, each in a thread (tools/worker.py): a batch whose calls
# wait (a sleep, a service, a sandbox child) costs about its longest call, not their sum.
CALLS_PER_WORKER = 32

# Why a call failed (ToolResult.error), for the metrics.
UNKNOWN_TOOL, BAD_ARGUMENTS, MALFORMED = "unknown_tool", "bad_arguments", "malformed"
TOOL_ERROR, TOOL_TIMEOUT, WORKER_DIED = "tool_error", "timeout", "worker_died"


@dataclass(frozen=True)
class ToolResult:
    tool: str
    status: str           # ok | error | timeout
    text: str             # the answer the model reads ("error: ...", "timeout after N s")
    seconds: float
    error: str = ""       # "" or one of the kinds above
    cut: bool = False     # the answer was cut at the response limit
    sandbox: str = ""     # best_effort: which sandbox layers this call ran without

    def as_json(self) -> dict:
        return {"status": self.status, "text": self.text, "seconds": round(self.seconds, 3)}


def cut_response(text: str, limits: ToolLimits, tokenizer=None) -> Tuple[str, bool]:
    """The answer cut at max_response_tokens (with a tokenizer) or max_response_chars, with a
    marker saying how much was left out."""
    if tokenizer is not None and limits.max_response_tokens:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) > limits.max_response_tokens:
            kept = tokenizer.decode(ids[:limits.max_response_tokens])
            return (kept + f"\n[cut: {len(ids) - limits.max_response_tokens} more tokens]",
                    True)
        return text, False
    if len(text) > limits.max_response_chars:
        return (text[:limits.max_response_chars]
                + f"\n[cut: {len(text) - limits.max_response_chars} more characters]", True)
    return text, False


class ToolRunner:
    """The named tools, a pool of workers that runs their calls, and the sandbox check.

    Args:
        tools: shipped names and users' `module:function` / `file.py:function` entries.
        limits: ToolLimits of every call.
        num_workers: pool workers (calls of one batch run in parallel across them).
        calls_per_worker: calls each worker runs at once, in threads (1: one after another);
            sandbox children are held to one per core per worker besides (tools/worker.py).
        tokenizer: with `limits.max_response_tokens`, answers are cut in tokens.
        layers: the sandbox probe's answer (default: `sandbox.probe()`, asked when a
            sandboxed tool is named); tests pass one to simulate a machine.
        announce: where the sandbox's layer report goes at start (a run prints it).
        mp_context: "forkserver" or "spawn", as the pool's.
    Raises:
        ValueError for an unknown or malformed tool entry; SandboxUnavailable in strict mode
        where a layer the sandbox needs cannot be set up (named).
    """

    def __init__(self, tools: Sequence[str], limits: ToolLimits = ToolLimits(),
                 num_workers: int = 2, tokenizer=None, layers: Optional[Mapping[str, str]] = None,
                 announce: Callable[[str], None] = logger.info,
                 mp_context: str = "forkserver",
                 calls_per_worker: int = CALLS_PER_WORKER) -> None:
        self.tools: Dict[str, Tool] = resolve_all(tools)
        self.limits = limits
        self.tokenizer = tokenizer
        self.layers: Optional[Dict[str, str]] = None
        self.sandbox_note = ""
        if any(t.sandboxed for t in self.tools.values()):
            self.layers = dict(sandbox.probe() if layers is None else layers)
            for line in sandbox.describe(self.layers):
                announce(line)
            missing = sandbox.check_mode(limits.sandbox, self.layers)  # strict: raises
            if missing:
                self.sandbox_note = "sandbox best_effort: without " + ", ".join(sorted(missing))
                announce(f"{self.sandbox_note}: every python call's result says so")
        self._scratch_root = tempfile.mkdtemp(prefix="mindrl-tools-")
        entries = {name: (name if BUILTIN.get(name) == t.spec else t.spec)
                   for name, t in self.tools.items()}
        try:
            self.pool = WorkerPool(
                worker.KIND,
                (entries, limits.as_dict(), self.layers, self._scratch_root),
                num_workers=num_workers,
                timeout=limits.timeout_s + GRACE_S,
                mp_context=mp_context,
                max_chunk=4,
                name="tool",
                concurrency=calls_per_worker,
            )
        except BaseException:
            shutil.rmtree(self._scratch_root, ignore_errors=True)
            raise
        self.counts: Counter = Counter()
        # The counts' lock: batches answer from several threads at once (the pool shares its
        # workers between them).
        self._lock = threading.Lock()

    # -- public

    def schemas(self) -> List[dict]:
        """What the model is shown (the chat template's `tools`)."""
        return [t.schema for t in self.tools.values()]

    def call(self, name: Any, arguments: Any) -> ToolResult:
        return self.call_many([(name, arguments)])[0]

    def call_many(self, calls: Sequence[Tuple[Any, Any]]) -> List[ToolResult]:
        """One ToolResult per (name, arguments) call, in order; calls run at once, up to
        calls_per_worker on each worker. Never raises for a bad call; thread-safe: batches
        called from several threads run at once on the pool (an interleaved rollout answers
        each episode's turn on its own, rollout/interleaved.py)."""
        results = self._call_many(calls)
        with self._lock:
            for r in results:
                self._count(r)
        return results

    def _call_many(self, calls: Sequence[Tuple[Any, Any]]) -> List[ToolResult]:
        start = time.monotonic()
        results: List[Optional[ToolResult]] = [None] * len(calls)
        jobs, where = [], []
        for i, call in enumerate(calls):
            checked = self._check(call)
            if isinstance(checked, ToolResult):
                results[i] = checked
            else:
                jobs.append(checked)
                where.append(i)
        if jobs:
            outcomes = self.pool.map(jobs)
            elapsed = time.monotonic() - start
            for i, (name, _), outcome in zip(where, jobs, outcomes):
                results[i] = self._answer(name, outcome, elapsed)
        return results  # type: ignore[return-value]

    def metrics(self) -> Dict[str, float]:
        """Counts since start (or the last reset): tools/calls, tools/ok, tools/errors,
        tools/timeouts, tools/cut, per error kind, per tool, and the pool's restarts."""
        with self._lock:
            out = {f"tools/{k}": float(v) for k, v in sorted(self.counts.items())}
        out["tools/worker_restarts"] = float(self.pool.restarts)
        return out

    def reset_metrics(self) -> None:
        with self._lock:
            self.counts.clear()

    def drain_metrics(self) -> Dict[str, float]:
        """`metrics()` since the last drain, then reset: a step's tool activity."""
        with self._lock:
            out = {f"tools/{k}": float(v) for k, v in sorted(self.counts.items())}
            self.counts.clear()
        out["tools/worker_restarts"] = float(self.pool.restarts)
        return out

    def close(self) -> None:
        try:
            self.pool.close()
        finally:
            shutil.rmtree(self._scratch_root, ignore_errors=True)

    def __enter__(self) -> "ToolRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals

    def _error(self, tool: str, message: str, kind: str, seconds: float = 0.0) -> ToolResult:
        text, cut = cut_response(f"error: {message}", self.limits, self.tokenizer)
        return ToolResult(tool, ERROR, text, seconds, kind, cut, self._note(tool))

    def _note(self, tool: str) -> str:
        t = self.tools.get(tool)
        return self.sandbox_note if t is not None and t.sandboxed else ""

    def _check(self, call) -> Any:
        """(name, arguments dict) for the pool, or the error answer."""
        try:
            name, arguments = call
        except (TypeError, ValueError):
            return self._error("", "a tool call is a name and its arguments", MALFORMED)
        if not isinstance(name, str) or not name:
            return self._error("", "the tool call has no tool name", MALFORMED)
        shown = name if len(name) <= 64 else name[:64] + "..."
        if name not in self.tools:
            return self._error(shown, f"unknown tool {shown!r}; tools: "
                               f"{', '.join(self.tools)}", UNKNOWN_TOOL)
        if isinstance(arguments, (str, bytes)):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError) as e:
                return self._error(name, f"the arguments are not valid JSON: {e}"[:300],
                                   MALFORMED)
        elif arguments is None:
            arguments = {}
        try:
            return name, check_arguments(self.tools[name].schema, arguments)
        except ArgumentError as e:
            return self._error(name, f"{name}: {e}", BAD_ARGUMENTS)

    def _answer(self, name: str, outcome, elapsed: float) -> ToolResult:
        value = outcome.value if isinstance(outcome.value, tuple) else (None, None)
        text, seconds = value
        note = self._note(name)
        if outcome.status == OK:
            answer, cut = cut_response(text, self.limits, self.tokenizer)
            return ToolResult(name, OK, answer, seconds, "", cut, note)
        if outcome.status == TIMEOUT:
            secs = seconds if seconds is not None else self.limits.timeout_s
            return ToolResult(name, TIMEOUT, f"timeout after {self.limits.timeout_s:g} s",
                              secs, TOOL_TIMEOUT, False, note)
        died = seconds is None   # settled by the pool: the worker died under the call
        return self._error(name, outcome.detail, WORKER_DIED if died else TOOL_ERROR,
                           elapsed if died else seconds)

    def _count(self, r: ToolResult) -> None:
        self.counts["calls"] += 1
        self.counts["seconds"] += float(r.seconds or 0.0)
        self.counts[{OK: "ok", ERROR: "errors", TIMEOUT: "timeouts"}[r.status]] += 1
        if r.error:
            self.counts[f"error/{r.error}"] += 1
        if r.cut:
            self.counts["cut"] += 1
        if r.tool in self.tools:
            self.counts[f"calls/{r.tool}"] += 1


__all__ = ["ToolRunner", "ToolResult", "cut_response", "SandboxUnavailable"]
