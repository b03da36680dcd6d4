"""Facts about local processes that several layers ask: whether a pid lives (stale files are
named by one), which machine this is, and which Ray node."""

import os
import socket
import zlib


def pid_alive(pid: int) -> bool:
    """The process exists (one of another user's counts as alive: never touch its files)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def node_id() -> int:
    """Same value in processes of one machine (one boot), different across machines."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return zlib.crc32(f"{socket.gethostname()}/{boot}".encode())


def this_node() -> str:
    """The Ray node id of this process (nodes may share an IP); the machine's when outside
    Ray."""
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except Exception:
        pass
    return f"host-{node_id()}"
