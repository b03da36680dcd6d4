"""Tools of a user's own for the runner tests: trusted test code run in-process in the pool's
workers (loaded as `.../tool_helpers.py:NAME`), never model-written code."""

import os
import time
from typing import List, Literal, Optional


def sleep_forever(pid_file: str) -> str:
    """Write this worker's pid, then never answer (past any deadline).

    Args:
        pid_file: where to write the pid.
    """
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(3600)


def boom(message: str = "tool bug") -> str:
    """Raise an error.

    Args:
        message: the error's text.
    """
    raise RuntimeError(message)


def exit_worker() -> str:
    """Kill the worker it runs in."""
    os._exit(3)


def big(n: int) -> str:
    """Answer n characters.

    Args:
        n: how many.
    """
    return "z" * n


def typed(count: int, ratio: float, flag: bool = False, tags: Optional[List[str]] = None,
          mode: Literal["fast", "slow"] = "fast") -> str:
    """Echo typed arguments back.

    Each parameter has its own type.

    Args:
        count: an integer.
        ratio: a number
            (an integer is fine too).
        flag: true or false.
        tags: a list of strings, or nothing.
        mode: one of two words.
    """
    return f"{count} {ratio} {flag} {tags} {mode}"


def no_hint(x) -> str:
    """Has a parameter without a type hint."""
    return str(x)


def no_doc(x: int) -> str:
    return str(x)


def returns_int(x: int) -> int:
    """Returns an int, not an answer."""
    return x


def nap(seconds: float, tag: int = 0) -> str:
    """Sleep, then answer the tag.

    Args:
        seconds: how long.
        tag: what to answer.
    """
    time.sleep(seconds)
    return str(tag)
