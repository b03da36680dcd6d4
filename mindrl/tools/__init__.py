"""Tools for agentic episodes: a registry of typed functions (their JSON schemas derived from
hints and docstrings), the shipped `calculator`, `python` (in the code sandbox) and `search`
(BM25 over a local corpus), and `ToolRunner`, which answers calls through the worker pool the
verifiers use (mindrl/rewards/pool.py). `python -m mindrl.tools` lists tools and runs one call.

Layer: above config (config checks tool names without importing this package), below the
rollout that calls it (docs/design.md#layers).
"""

from .errors import SandboxUnavailable, ToolError, ToolTimeout
from .limits import BEST_EFFORT, SANDBOX_MODES, STRICT, ToolLimits
from .registry import BUILTIN, Tool, resolve, resolve_all
from .runner import ToolResult, ToolRunner, cut_response

__all__ = ["BUILTIN", "BEST_EFFORT", "STRICT", "SANDBOX_MODES", "SandboxUnavailable", "Tool",
           "ToolError", "ToolLimits", "ToolResult", "ToolRunner", "ToolTimeout",
           "cut_response", "resolve", "resolve_all"]
