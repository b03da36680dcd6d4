"""The suite's preload servers (tests/conftest.py, mindrl/workers/preload_servers.py) serve the
workers of a run: an actor started as the engines and ranks are (worker_env, its kind's
runtime_env) is forked by the server of its kind. A fallback to a plain start would be silent
(correct, only slower), so this test is what notices the environments drifting apart."""

import os
import time
from pathlib import Path

import psutil
import pytest

from mindrl.platforms import preload
from mindrl.workers.worker_group import worker_env

pytestmark = pytest.mark.slow


def test_engines_and_ranks_fork_from_the_server_of_their_kind(tmp_path):
    directory = os.environ.get(preload.PRELOAD_DIR_ENV)
    if not directory:
        pytest.skip("this session runs without preload servers (MINDRL_PRELOAD=0)")
    deadline = time.monotonic() + 300
    while not all((Path(directory) / f"{kind}.sock").exists() for kind in preload.PRELOADS):
        assert time.monotonic() < deadline, "the session's preload servers never got ready"
        time.sleep(0.5)
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=128 * 2**20, log_to_driver=False)
    try:
        @ray.remote(num_cpus=1)
        class Probe:
            def parent(self):
                return psutil.Process(os.getppid()).cmdline()

        for kind in preload.PRELOADS:
            actor = Probe.options(runtime_env=preload.runtime_env(kind, worker_env())).remote()
            parent = ray.get(actor.parent.remote(), timeout=120)
            assert parent[-3:-1] == ["mindrl.platforms.preload", kind], \
                f"a {kind} worker started plainly (its parent: {parent})"
            ray.kill(actor)
    finally:
        ray.shutdown()
