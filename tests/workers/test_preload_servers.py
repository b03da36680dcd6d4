"""The suite's preload servers (tests/conftest.py, mindrl/workers/preload_servers.py) serve the
workers of a run: an actor started as the engines and ranks are (worker_env, its kind's
runtime_env) is forked by the server of its kind. A fallback to a plain start would be silent
(correct, only slower), so this test is what notices the environments drifting apart."""

import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from mindrl.platforms import preload
from support import run_env
from support.grpo_runs import REPO
from mindrl.workers.worker_group import LOCAL_NODE_ENV, worker_env



def _wait_for_servers(directory: str) -> None:
    deadline = time.monotonic() + 300
    while not all((Path(directory) / f"{kind}.sock").exists() for kind in preload.PRELOADS):
        assert time.monotonic() < deadline, "the session's preload servers never got ready"
        time.sleep(0.5)


@pytest.mark.slow
def test_engines_and_ranks_fork_from_the_server_of_their_kind(tmp_path, monkeypatch):
    directory = os.environ.get(preload.PRELOAD_DIR_ENV)
    if not directory:
        pytest.skip("this session runs without preload servers (MINDRL_PRELOAD=0)")
    _wait_for_servers(directory)
    # As an in-process engine of an earlier test leaves it, then as a run's driver starts:
    # without that.
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    run_env.restore(monkeypatch)
    import ray

    for key, value in LOCAL_NODE_ENV.items():   # as trainer/launch.py starts a local node
        monkeypatch.setenv(key, value)
    with preload.ray_node_python():
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 object_store_memory=128 * 2**20, log_to_driver=False)
    try:
        @ray.remote(num_cpus=1)
        class Probe:
            def parent(self):
                return psutil.Process(os.getppid()).cmdline()

        for kind in ("vllm", "megatron"):
            actor = Probe.options(runtime_env=preload.runtime_env(kind, worker_env())).remote()
            parent = ray.get(actor.parent.remote(), timeout=120)
            assert parent[-3:-1] == ["mindrl.platforms.preload", kind], \
                f"a {kind} worker started plainly (its parent: {parent})"
            ray.kill(actor)
        # each worker's setup step (Ray's setup_worker.py) forked from the ray_setup server
        # (any environment). The node's dashboard and monitors are not checked here: this
        # node starts from the pytest process, whose environment an earlier in-process engine
        # may have changed, so the ray_node server rightly refuses them; a run's driver starts
        # its node from the session's environment (support/run_env.py).
        notes = Path(directory) / preload.PLAIN_STARTS
        refused = [line for line in (notes.read_text() if notes.exists() else "").splitlines()
                   if line.startswith(preload.EXEC_ONLY["ray_setup"])]
        assert not refused, refused
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_a_training_driver_forks_from_the_driver_server(tmp_path, monkeypatch):
    """As support/grpo_runs starts cli/train_grpo.py: its environment, the client in front,
    from a test process that has imported vLLM (which sets variables its children inherit) and
    built an engine (which leaves its own: support/run_env.py)."""
    directory = os.environ.get(preload.PRELOAD_DIR_ENV)
    if not directory:
        pytest.skip("this session runs without preload servers (MINDRL_PRELOAD=0)")
    _wait_for_servers(directory)
    import vllm.env_override  # noqa: F401
    from support.grpo_runs import _command

    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")

    script = tmp_path / "parent.py"
    script.write_text("import os, psutil\nprint(psutil.Process(os.getppid()).cmdline())\n")
    cmd, env = _command(tmp_path, tmp_path / "run", [])
    at = cmd.index(str(REPO / "cli" / "train_grpo.py"))
    out = subprocess.run(cmd[:at] + [str(script)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path))
    assert "'mindrl.platforms.preload', 'driver'" in out.stdout, out.stdout + out.stderr[-2000:]


class _Server:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


def test_wait_ready_returns_once_every_socket_exists_or_its_server_ended(tmp_path):
    from mindrl.workers import preload_servers

    kinds = list(preload.PRELOADS)
    for kind in kinds[1:]:
        (tmp_path / f"{kind}.sock").touch()
    # The first kind's server ended without its socket: nothing left to wait for.
    assert preload_servers.wait_ready(tmp_path, [_Server(1)] + [_Server()] * (len(kinds) - 1),
                                      timeout_s=60) == [kinds[0]]
    # Still importing at the deadline: named.
    assert preload_servers.wait_ready(tmp_path, [_Server()] * len(kinds),
                                      timeout_s=0.3) == [kinds[0]]
    (tmp_path / f"{kinds[0]}.sock").touch()
    assert preload_servers.wait_ready(tmp_path, [_Server()] * len(kinds), timeout_s=60) == []
