"""The code sandbox, parent side: run code in a fresh, confined child and answer what it printed.

Each call gets a fresh interpreter (`python -I -S mindrl/tools/sandbox_child.py`), started
with an empty environment, stdin closed, no inherited file descriptor but its output pipe and
a report pipe, in a new session (its own process group), in a scratch folder made for the
call. The child sets up the confining layers itself (sandbox_child.py) before any of the code
runs. The parent reads at most `max_output_bytes` of its output (the rest is drained and
counted), kills the whole process group at the wall deadline, and removes the scratch folder.

Layers (docs/guides/security.md says what each stops and what it does not):
  process_group, environment, scratch_folder  set up by the parent; hold wherever Linux does;
  rlimits, network_namespace, capabilities, landlock, seccomp, audit_hook  set up by the
      child; `probe()` asks the machine, once per process, in a throwaway child.

`sandbox: strict` refuses to run where a layer does not hold, naming it; `best_effort` runs
with the layers that hold and every result says which are missing.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from .errors import SandboxUnavailable
from .limits import STRICT, ToolLimits
from .sandbox_child import CHILD_LAYERS, SETUP_FAILED

CHILD = str(Path(__file__).with_name("sandbox_child.py"))
PARENT_LAYERS = ("process_group", "environment", "scratch_folder")
LAYERS = PARENT_LAYERS + CHILD_LAYERS
OK, ERROR, TIMEOUT, REFUSED = "ok", "error", "timeout", "refused"

Layers = Mapping[str, str]      # layer -> "" when it holds, else why it does not


@dataclass(frozen=True)
class SandboxResult:
    status: str                 # ok | error (non-zero exit) | timeout | refused (not run)
    output: str                 # stdout + stderr, cut at max_output_bytes with a marker
    exit_code: Optional[int]    # negative: killed by that signal; None: not run / timed out
    seconds: float
    held: Tuple[str, ...] = ()
    missing: Dict[str, str] = field(default_factory=dict)
    output_bytes: int = 0       # what the code wrote in all, before the cut
    pgid: Optional[int] = None  # the child's process group (gone when run_python returns)

    @property
    def note(self) -> str:
        """'' when every layer held, else what a best-effort trace says."""
        if not self.missing:
            return ""
        return "sandbox best_effort: without " + ", ".join(sorted(self.missing))


def _libs() -> Dict[str, Optional[str]]:
    import ctypes.util

    return {"c": ctypes.util.find_library("c"), "seccomp": ctypes.util.find_library("seccomp")}


@functools.lru_cache(maxsize=1)
def _static_config() -> dict:
    spec = importlib.util.find_spec("pyseccomp")
    pyseccomp_dir = str(Path(spec.origin).parent) if spec and spec.origin else None
    stdlib = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
              os.path.join(sys.base_prefix, "lib", f"python{sys.version_info[0]}"
                           f"{sys.version_info[1]}.zip")}
    dynload = [p for p in sys.path if p.rstrip("/").endswith("lib-dynload")]
    zoneinfo = [p for p in ("/usr/share/zoneinfo",) if os.path.isdir(p)]
    read_paths = sorted(p for p in stdlib | set(dynload) | set(zoneinfo) if os.path.exists(p))
    return {"pyseccomp_dir": pyseccomp_dir, "libs": _libs(), "read_paths": read_paths}


def _parent_layers() -> Dict[str, str]:
    if not sys.platform.startswith("linux"):
        reason = f"needs Linux, this is {sys.platform}"
        return {layer: reason for layer in LAYERS}
    return {layer: "" for layer in PARENT_LAYERS}


@functools.lru_cache(maxsize=1)
def probe() -> Dict[str, str]:
    """Which layers hold on this machine: layer -> "" or the reason it does not. Asked of a
    throwaway child that sets every layer up exactly as a call would (nothing is assumed)."""
    layers = _parent_layers()
    if any(layers.values()):
        return layers
    with tempfile.TemporaryDirectory(prefix="mindrl-sandbox-probe-") as scratch:
        result = _run_child(None, ToolLimits(timeout_s=20.0), list(CHILD_LAYERS), False,
                            scratch, probe_only=True)
    if result.status == REFUSED or (not result.held and not result.missing):
        reason = f"the probe child failed: {result.output.strip()[-300:] or result.status}"
        layers.update({layer: reason for layer in CHILD_LAYERS})
        return layers
    for layer in CHILD_LAYERS:
        layers[layer] = "" if layer in result.held else result.missing.get(layer, "not set up")
    return layers


def describe(layers: Layers) -> List[str]:
    """One line per layer, what a run prints at start."""
    return [f"sandbox layer {layer}: " + ("holds" if not layers.get(layer, "not probed")
                                          else f"unavailable ({layers.get(layer, 'not probed')})")
            for layer in LAYERS]


def missing_layers(layers: Layers) -> Dict[str, str]:
    return {layer: layers.get(layer, "not probed") for layer in LAYERS
            if layers.get(layer, "not probed")}


def check_mode(mode: str, layers: Layers) -> Dict[str, str]:
    """The missing layers; in strict mode, SandboxUnavailable naming them if any."""
    missing = missing_layers(layers)
    if mode == STRICT and missing:
        named = "; ".join(f"{layer} ({why})" for layer, why in missing.items())
        raise SandboxUnavailable(
            f"sandbox strict: layer(s) {', '.join(missing)} cannot be set up on this machine: "
            f"{named}. The python tool does not run without them; agent_config.sandbox: "
            f"best_effort runs with the layers that hold (docs/guides/security.md)")
    return missing


def run_python(code: str, limits: ToolLimits = ToolLimits(), layers: Optional[Layers] = None,
               scratch_root: Optional[str] = None) -> SandboxResult:
    """Run `code` in a fresh sandboxed child; never raises for what the code does.

    `layers`: the probe's answer (default: `probe()`); a test passes its own to simulate a
    machine where a layer is unavailable. Strict mode with a layer missing: REFUSED, not run.
    """
    layers = probe() if layers is None else layers
    missing = missing_layers(layers)
    if limits.sandbox == STRICT and missing:
        try:
            check_mode(STRICT, layers)
        except SandboxUnavailable as e:
            return SandboxResult(REFUSED, str(e), None, 0.0, missing=missing)
    if any(layers.get(layer) for layer in PARENT_LAYERS):
        return SandboxResult(REFUSED, "sandbox: this machine cannot run the sandbox at all: "
                             + layers.get("process_group", ""), None, 0.0, missing=missing)
    apply = [layer for layer in CHILD_LAYERS if not layers.get(layer, "not probed")]
    scratch = tempfile.mkdtemp(prefix="call-", dir=scratch_root)
    try:
        result = _run_child(code, limits, apply, limits.sandbox == STRICT, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for layer in CHILD_LAYERS:   # what the probe said is missing, and what failed now
        if layer not in apply:
            result.missing.setdefault(layer, layers.get(layer, "not probed"))
    return result


def _run_child(code: Optional[str], limits: ToolLimits, apply: List[str], strict: bool,
               scratch: str, probe_only: bool = False) -> SandboxResult:
    start = time.monotonic()
    deadline = start + limits.timeout_s
    config = dict(_static_config(), apply=apply, strict=strict, parent=os.getpid(),
                  scratch=scratch, code_file=None, limits={
                      "cpu_s": limits.cpu_seconds, "memory_bytes": limits.memory_mb * 2**20,
                      "file_size_bytes": limits.file_size_mb * 2**20,
                      "open_files": limits.open_files})
    if code is not None:
        code_file = os.path.join(scratch, ".code.py")
        with open(code_file, "w", encoding="utf-8") as f:
            f.write(code)
        config["code_file"] = code_file
    report_r, report_w = os.pipe()
    out_r, out_w = os.pipe()
    config["report_fd"] = report_w
    argv = [sys.executable, "-I", "-S", CHILD] + (["--probe"] if probe_only else []) + [
        json.dumps(config)]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                env={}, cwd=scratch, close_fds=True, pass_fds=(report_w,),
                                start_new_session=True)
    except OSError as e:
        for fd in (report_r, report_w, out_r, out_w):
            os.close(fd)
        return SandboxResult(REFUSED, f"sandbox: cannot start the child: {e}", None,
                             time.monotonic() - start)
    os.close(out_w)
    os.close(report_w)
    kept, total, timed_out = bytearray(), 0, False
    try:
        open_fds = {out_r, report_r}
        report = bytearray()
        while out_r in open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(list(open_fds), [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == report_r:
                    report += chunk
                else:
                    total += len(chunk)
                    room = limits.max_output_bytes - len(kept)
                    if room > 0:
                        kept += chunk[:room]
        if not timed_out:
            try:   # the output closed; the child may still run (it closed its stdout)
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        _kill_group(proc)
        while True:   # whatever of the report is left (the child exited or was killed)
            try:
                ready, _, _ = select.select([report_r], [], [], 0)
                chunk = os.read(report_r, 65536) if ready else b""
            except OSError:
                chunk = b""
            if not chunk:
                break
            report += chunk
        os.close(out_r)
        os.close(report_r)
    seconds = time.monotonic() - start
    output = kept.decode("utf-8", errors="replace")
    if total > len(kept):
        output += f"\n[output cut: {total - len(kept)} more bytes]"
    try:
        info = json.loads(bytes(report).decode()) if report else {}
    except ValueError:
        info = {}
    held, missing = tuple(info.get("held", ())), dict(info.get("missing", {}))
    common = dict(held=held, missing=missing, output_bytes=total, pgid=proc.pid)
    if info.get("refused"):
        return SandboxResult(REFUSED, f"sandbox strict: layer {info['refused']}", None,
                             seconds, **common)
    if timed_out:
        return SandboxResult(TIMEOUT, output, None, seconds, **common)
    code_ = proc.returncode
    if code_ == SETUP_FAILED and not info:
        return SandboxResult(REFUSED, output or "sandbox: the child failed to set up", code_,
                             seconds, **common)
    if code_ and code_ < 0:
        output += f"\n[killed by {_signal_name(-code_)}]"
    return SandboxResult(OK if code_ == 0 else ERROR, output, code_, seconds, **common)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it is its session's leader), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:   # cannot happen for SIGKILL short of a kernel hang
        pass


def _signal_name(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    why = {"SIGXCPU": " (the CPU limit)", "SIGKILL": " (the CPU or memory limit)",
           "SIGXFSZ": " (the file-size limit)", "SIGSEGV": ""}.get(name, "")
    return f"{name}{why}"
