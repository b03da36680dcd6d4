"""What one tool call may use: `ToolLimits`, with defaults.

The recipe's `agent_config` section (not yet in the schema) will fill it; until then the CLI
builds it from flags (`python -m mindrl.tools call --help`) and a caller from keywords.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Mapping, Optional

STRICT, BEST_EFFORT = "strict", "best_effort"
SANDBOX_MODES = (STRICT, BEST_EFFORT)


@dataclass(frozen=True)
class ToolLimits:
    """Deadlines and limits of every tool call.

    timeout_s: wall deadline of one call (agent_config.tool_timeout_s). A sandboxed call's child
        is killed then; an in-process tool that is still running a grace second later has its
        worker killed and replaced. Either way the answer is "timeout after N s".
    max_response_chars: a tool's answer is cut to this many characters, with a marker.
    max_response_tokens: when set and the runner has a tokenizer, the answer is cut to this
        many tokens instead (agent_config.max_tool_response_tokens).
    sandbox: "strict" (refuse to start where a sandbox layer cannot be set up, naming it) or
        "best_effort" (run with the layers that hold, and say so in every result).
    memory_mb: address-space limit of the sandbox child (RLIMIT_AS).
    cpu_s: CPU seconds of the sandbox child (RLIMIT_CPU; default: the deadline rounded up).
    file_size_mb: largest file the child may write in its scratch folder (RLIMIT_FSIZE).
    open_files: most open files of the child (RLIMIT_NOFILE).
    max_output_bytes: what the child's stdout + stderr are cut to before anything else.
    max_code_chars: the longest `python` code accepted.
    search_corpus: jsonl of {"id", "text"} that `search` ranks with BM25 (a dataset recipe
        prepares it); None: `search` answers an error.
    """

    timeout_s: float = 10.0
    max_response_chars: int = 4096
    max_response_tokens: Optional[int] = None
    sandbox: str = STRICT
    memory_mb: int = 1024
    cpu_s: Optional[int] = None
    file_size_mb: int = 16
    open_files: int = 64
    max_output_bytes: int = 65536
    max_code_chars: int = 65536
    search_corpus: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"tool timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, "
                             f"got {self.sandbox!r}")
        for name in ("max_response_chars", "memory_mb", "file_size_mb", "open_files",
                     "max_output_bytes", "max_code_chars"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"tool limit {name} must be >= 1, got {getattr(self, name)}")
        if self.max_response_tokens is not None and self.max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1, got {self.max_response_tokens}")
        if self.cpu_s is not None and self.cpu_s < 1:
            raise ValueError(f"cpu_s must be >= 1, got {self.cpu_s}")

    @property
    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else max(1, int(-(-self.timeout_s // 1)))

    @classmethod
    def from_mapping(cls, values: Mapping) -> "ToolLimits":
        """From a mapping of these field names; an unknown key is a ValueError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown tool limit(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(values))

    def as_dict(self) -> dict:
        return asdict(self)
