"""One report when a run stops because a member died or missed the phase deadline.

Written before teardown to <run_dir>/failure_report.txt: the phase, the step, the deadline,
the cause (timeout or death), the members that did not answer (or died) with their node id and
IP, then the Python stack of every live member (workers/stack_dump.py). The console gets a
few lines pointing at the file.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from mindrl.errors import PhaseTimeout

PHASES = {"generate": "generate", "compute_scores": "reward-model scoring",
          "update": "update", "sync_weights": "weight sync", "save_checkpoint": "save",
          "load_checkpoint": "resume (load checkpoint)", "offload": "offload",
          "onload": "onload", "attach_engines": "weight sync setup"}
REPORT_NAME = "failure_report.txt"


def phase_name(what: Optional[str], who: List[str]) -> str:
    """The step's phase a member method belongs to ("compute_log_probs" by its role)."""
    if what == "compute_log_probs":
        return "ref log-prob pass" if any(w.startswith("ref ") for w in who) \
            else "old log-prob pass"
    return PHASES.get(what, what or "unknown")


def _node_addresses() -> Dict[str, str]:
    """Ray node id -> IP, dead nodes included (a removed node is still listed)."""
    import ray

    try:
        return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
    except Exception:
        return {}


def innermost_frame(stack: str) -> str:
    """Where the thread that runs the member's work is: the first frame under faulthandler's
    "Current thread" header, as "function (file:line)"; "" when the dump has none."""
    match = re.search(r'Current thread[^\n]*\n\s+File "([^"]+)", line (\d+) in (\S+)', stack)
    if not match:
        return ""
    path, line, function = match.groups()
    return f"{function} ({Path(path).name}:{line})"


def _where(m: dict, addresses: Dict[str, str]) -> str:
    node = m["node"]
    place = f"node {node} ({addresses.get(node, '?')})" if node else "node unknown"
    return f"{m['who']}: pid {m['pid'] if m['pid'] is not None else '?'}, {place}"


def member_named(who: str, members: List[dict]) -> dict:
    """The member an error names: by its label, or by the label's short form without the
    placement in brackets ("rollout engine 0" for "rollout engine 0 (actor device 0)": the
    weight fan-out knows engines by index only); unlocated if none."""
    for m in members:
        if m["who"] == who or m["who"].startswith(who + " ("):
            return m
    return {"who": who, "pid": None, "node": None}


def write_failure_report(error: Exception, members: List[dict], step: int,
                         phase_timeout_s: float, run_dir: Path,
                         log: Callable[[str], None] = print) -> Path:
    """Collect the members' stacks, write the report, print its summary; the report path."""
    from mindrl.workers.stack_dump import collect, is_gone

    timed_out = isinstance(error, PhaseTimeout)
    who = list(getattr(error, "who", []) or [])
    phase = phase_name(getattr(error, "what", None), who)
    addresses = _node_addresses()
    failed = [member_named(w, members) for w in who]
    stacks = collect(members)
    if not timed_out:   # every member found gone (a lost node takes several with it)
        failed += [m for m in members if m["pid"] is not None and m not in failed
                   and is_gone(stacks[m["pid"]])]
    cause = (f"timeout: no answer within phase_timeout_s={phase_timeout_s:g} s" if timed_out
             else "death: a process the run needs is gone")
    lines = [f"MindRL run stopped at {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"phase: {phase}", f"step: {step}", f"deadline: {phase_timeout_s:g} s "
             f"(rl_config.phase_timeout_s)", f"cause: {cause}",
             f"error: {error}", "",
             ("did not answer:" if timed_out else "died:")]

    def located(m: dict) -> str:   # where it ran, and where its work was when it stopped
        frame = innermost_frame(stacks.get(m["pid"], ""))
        return _where(m, addresses) + (f"; at {frame}" if frame else "")

    lines += [f"  {located(m)}" for m in failed] or ["  (not known)"]
    lines += ["", "members:"] + [f"  {_where(m, addresses)}" for m in members]
    for m in members:
        if m["pid"] is None:
            continue
        lines += ["", f"===== stack of {_where(m, addresses)} =====",
                  stacks.get(m["pid"], "(no stack collected)").rstrip()]
    path = Path(run_dir) / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    log(f"run stopped in phase {phase} at step {step} ({'timeout' if timed_out else 'death'})"
        + ("" if failed else ": who failed is not known"))
    for m in failed:
        log(f"  {located(m)}")
    log(f"failure report with every live worker's Python stack: {path}")
    return path


def report_failure(error: Exception, groups: list, step: int, phase_timeout_s: float,
                   run_dir: Path, log: Callable[[str], None] = print) -> Optional[Path]:
    """The report for the run's groups (worker groups, the rollout group; None skipped);
    a report that cannot be written is said, never raised over the run's own error."""
    try:
        members = [m for group in groups if group is not None for m in group.members()]
        return write_failure_report(error, members, step, phase_timeout_s, run_dir, log)
    except Exception as e:
        log(f"could not write the failure report: {type(e).__name__}: {e}")
        return None
