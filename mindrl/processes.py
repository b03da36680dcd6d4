"""Facts about local processes that several layers ask (stale files named by a pid)."""

import os


def pid_alive(pid: int) -> bool:
    """The process exists (one of another user's counts as alive: never touch its files)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
