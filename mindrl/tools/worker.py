"""The tool kind of the shared worker pool (mindrl/rewards/pool.py): each worker resolves the
tools once and runs (name, arguments) calls. In-process tools (calculator, search, a user's)
run here, in the worker; `python` starts its sandbox child from here.

The tool pool runs several calls per worker at once (ToolRunner's calls_per_worker), each in a
thread: tools must be thread-safe (the shipped ones are). A call that waits (a sleep, a
network service, a sandbox child) lets the others run; pure-Python computation shares the
GIL, so it gains nothing from the threads. At most `sandbox_slots()` sandbox children run at
once per worker (one per core it may use: their memory and CPU are bounded per child, so the
bound on what the code can take together stays the cores' count times one child's); a python
call waiting for a slot does not count that wait against its deadline (the pool's "gate")."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from mindrl.rewards.pool import ERROR, OK, TIMEOUT

from . import context
from .errors import ToolError, ToolTimeout
from .limits import ToolLimits
from .registry import resolve

KIND = "mindrl.tools.worker:setup"


def sandbox_slots() -> int:
    """Sandbox children one worker runs at once: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def setup(entries: Dict[str, str], limits: dict, layers: Optional[Dict[str, str]],
          scratch_root: Optional[str]) -> Callable[[Tuple[str, dict]], tuple]:
    """entries: tool name -> what the parent resolved it from (a shipped name, or a user's
    module:function / absolute file.py:function)."""
    tools = {name: resolve(entry) for name, entry in entries.items()}
    tool_limits = ToolLimits.from_mapping(limits)
    context.set_current(context.ToolContext(tool_limits, layers, scratch_root))
    cap = max(tool_limits.max_output_bytes, tool_limits.max_response_chars) * 2

    def run(job: Tuple[str, dict]) -> tuple:
        name, arguments = job
        start = time.monotonic()
        try:
            value: Any = tools[name].function(**arguments)
            text = value if isinstance(value, str) else str(value)
            if len(text) > cap:   # the parent cuts to the response limit; bound the pipe
                text = text[:cap] + f"\n[cut: {len(text) - cap} more characters]"
            return OK, (text, time.monotonic() - start), ""
        except ToolTimeout as e:
            return TIMEOUT, (None, time.monotonic() - start), str(e)
        except ToolError as e:
            return ERROR, (None, time.monotonic() - start), str(e)
        except Exception as e:  # noqa: BLE001 - a tool's bug is the model's error answer
            message = e.args[0] if e.args and isinstance(e.args[0], str) else ""
            return ERROR, (None, time.monotonic() - start), f"{type(e).__name__}: {message[:500]}"

    sandboxed = frozenset(name for name, tool in tools.items() if tool.sandboxed)
    children = threading.BoundedSemaphore(sandbox_slots())

    def gate(job) -> Optional[threading.BoundedSemaphore]:
        """What a call holds while it runs: a sandbox slot for a sandboxed tool, else nothing."""
        return children if isinstance(job, tuple) and job and job[0] in sandboxed else None

    run.gate = gate   # type: ignore[attr-defined]  (read by the pool's concurrent workers)
    return run
