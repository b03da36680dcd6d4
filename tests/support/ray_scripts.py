"""Drive examples/r1's node scripts the way a user does, on one machine: a private Ray temp
dir and free ports per cluster, and a teardown that stops only the processes of that cluster
(`ray stop` would stop every Ray on the machine, other tests' included)."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
R1 = REPO / "examples" / "r1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_ip() -> str:
    return subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                          check=True).stdout.split()[0]


def script_env(temp_dir: str, devices_per_node: int, **extra) -> dict:
    """What a user exports before the scripts, with this venv's python and ray."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "MASTER_ADDR": node_ip(), "RAY_PORT": str(free_port()), "RESOURCE": "CPU",
           "DEVICES_PER_NODE": str(devices_per_node), "RAY_TEMP_DIR": temp_dir,
           "DASHBOARD_PORT": str(free_port()), "OBJECT_STORE_BYTES": str(200 * 2**20),
           "PYTHON": sys.executable, "RAY_BIN": str(Path(bin_dir) / "ray")}
    env.pop("RAY_ADDRESS", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def short_temp_dir() -> str:
    """Ray's unix sockets live under it: a pytest tmp_path can exceed their 107-byte limit."""
    return tempfile.mkdtemp(prefix="mrl-ray-", dir="/tmp")


def wait_for_port(address: str, timeout_s: float, proc=None) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the head script exited ({proc.returncode}) before {address} "
                               f"answered")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{address} did not answer within {timeout_s} s")


def stop_cluster(temp_dir: str) -> int:
    """SIGKILL every process of the cluster whose session lives in `temp_dir` (raylets and
    GCS ignore SIGTERM), then remove `temp_dir`; the number stopped."""
    import shutil

    import psutil

    victims = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(temp_dir in part for part in proc.info["cmdline"] or ()):
                victims.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=10)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return len(victims)
