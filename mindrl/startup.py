"""A process's start without Python's full garbage collections.

Importing torch, Megatron, transformers and vLLM builds about 470k long-lived objects, and
Python's collector passes over the whole growing heap 7 times meanwhile: 0.7-0.8 s of a 5 s
start (CPU, measured with gc.callbacks on the import of that stack). None of it is garbage. A
process that starts many of these (the driver, each Ray rank and rollout engine) defers full
collections while it imports and builds, and once started freezes what it built (gc.freeze:
later full collections skip it) and collects as before. Young collections go on throughout.
"""

import gc
from typing import Optional, Tuple

_deferred: Optional[Tuple[int, int, int]] = None   # the thresholds to restore


def defer_full_collections() -> None:
    """From now until `started`: young collections only."""
    global _deferred
    if _deferred is None:
        _deferred = gc.get_threshold()
        gc.set_threshold(_deferred[0], _deferred[1], 2**31 - 1)


def started() -> None:
    """The process is built: freeze its objects and collect as before. Only where this process
    deferred (a test process that builds an engine in-process is left as it is)."""
    global _deferred
    if _deferred is not None:
        gc.freeze()
        gc.set_threshold(*_deferred)
        _deferred = None
