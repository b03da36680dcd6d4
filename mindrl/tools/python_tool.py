"""`python(code)`: run code in the sandbox (sandbox.py) and answer what it printed."""

from __future__ import annotations

from . import context, sandbox
from .errors import ToolError, ToolTimeout


def python(code: str) -> str:
    """Run Python code and answer what it printed (stdout and stderr).

    Each call starts fresh: nothing is kept between calls, there is no network, no files
    outside the call's working folder, no subprocesses; use print() to show results. The
    standard library is available, no third-party packages.

    Args:
        code: the Python source to run.
    """
    ctx = context.current()
    limits = ctx.limits
    if len(code) > limits.max_code_chars:
        raise ToolError(f"code longer than {limits.max_code_chars} characters")
    result = sandbox.run_python(code, limits, ctx.layers, ctx.scratch_root)
    if result.status == sandbox.TIMEOUT:
        raise ToolTimeout(f"timeout after {limits.timeout_s:g} s")
    if result.status == sandbox.REFUSED:
        raise ToolError(result.output)
    if result.status == sandbox.ERROR:
        text = result.output.strip()
        raise ToolError(text if text else f"exit code {result.exit_code}")
    return result.output if result.output else "(no output)"
