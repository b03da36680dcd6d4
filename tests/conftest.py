"""Test-wide settings (support/session_env.py: offline hub, one torch thread per process), the
`slow` and `alone` markers, the order of the files, the session's preload servers."""

import os
import sys
from pathlib import Path

# Test helpers and rank bodies live in tests/support/ and are imported as `support.NAME`
# from every test folder, from spawned ranks and from verifier-pool workers (they inherit
# sys.path).
sys.path.insert(0, str(Path(__file__).parent))

from support import session_env  # noqa: E402

session_env.apply()

import torch  # noqa: E402

torch.set_num_threads(1)

import support.run_env  # noqa: E402,F401  (the environment before any test: runs start from it)


def pytest_configure(config):
    # `make test-fast` leaves these out (-m "not slow"); `make test` and .ci/run run all but `long`.
    config.addinivalue_line(
        "markers", "slow: a run of minutes (training through the CLI, a recipe in miniature, "
                   "a learning curve, a multi-process world); `make test-fast` leaves it out")
    config.addinivalue_line(
        "markers", "long: a learning curve of over 5 minutes, run by `make test-long` only "
                   "(`make test` keeps within 22 minutes on 2 cores)")
    config.addinivalue_line(
        "markers", "alone: runs by itself after the parallel part of `make test` (it asserts "
                   "on what no other run may touch meanwhile: a /dev/shm file a concurrent "
                   "run's start-up sweep would take, a phase deadline timed on a quiet machine)")


def pytest_collection_modifyitems(config, items):
    """The longest test files first (support/file_seconds.json: seconds per file, measured),
    so that `-n 2 --dist loadfile` hands them out early and both workers finish together;
    within a file the order stays as written."""
    import json

    seconds = json.loads((Path(__file__).parent / "support" / "file_seconds.json").read_text())
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0))


import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def preloaded_ray_workers(request, tmp_path_factory):
    """The Ray workers of every run a test starts fork from preload servers that imported
    vLLM or Megatron once (mindrl/platforms/preload/, docs/platforms.md#process-start-up):
    those MINDRL_PRELOAD_DIR names (`make test` starts one set for both phases and both
    workers: support/suite.py), else the session's own. Left out where the session runs no
    slow test (those start runs), or with MINDRL_PRELOAD=0."""
    from mindrl.platforms import preload
    from mindrl.workers import preload_servers

    slow = any(item.get_closest_marker("slow") for item in request.session.items)
    if os.environ.get("MINDRL_PRELOAD") == "0" or not slow:
        yield
        return
    given = os.environ.get(preload.PRELOAD_DIR_ENV)
    if given:
        support.run_env.PRELOAD_SERVERS[:] = [Path(given), None]
        yield
        return
    directory = tmp_path_factory.mktemp("preload")
    servers = preload_servers.start(directory)
    support.run_env.PRELOAD_SERVERS[:] = [directory, servers]   # run_env.wait_for_preload()
    os.environ[preload.PRELOAD_DIR_ENV] = str(directory)
    yield
    os.environ.pop(preload.PRELOAD_DIR_ENV, None)
    for server in servers:
        server.terminate()
        server.wait(timeout=30)
