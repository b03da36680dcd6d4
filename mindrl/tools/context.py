"""What a tool call runs under, set once in each pool worker (worker.py): the limits, the
sandbox layers to apply and the folder that holds the calls' scratch folders. Tools read it;
a process that never set it gets the defaults (a direct call in a test or the CLI's `list`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional

from .limits import ToolLimits


@dataclass(frozen=True)
class ToolContext:
    limits: ToolLimits = field(default_factory=ToolLimits)
    # layer -> "" when it holds, else why not (sandbox.probe()); None: probe when needed
    layers: Optional[Dict[str, str]] = None
    scratch_root: Optional[str] = None


_current = ToolContext()


def current() -> ToolContext:
    return _current


def set_current(context: ToolContext) -> None:
    global _current
    _current = context


@contextlib.contextmanager
def using(context: ToolContext) -> Iterator[ToolContext]:
    old = current()
    set_current(context)
    try:
        yield context
    finally:
        set_current(old)
