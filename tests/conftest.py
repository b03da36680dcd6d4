"""Test-wide settings: offline hub, one torch thread per process
(docs/platforms.md#one-torch-thread-per-process); the `slow` marker."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Test clusters are local and single-user. Ray 2.60 turns token auth on by default once a
# token exists in ~/.ray (any earlier Ray may leave one), and then `ray start` nodes of a
# test cluster refuse each other ("InvalidAuthToken").
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import torch  # noqa: E402

torch.set_num_threads(1)

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Test helpers and rank bodies live in tests/support/ and are imported as `support.NAME`
# from every test folder, from spawned ranks and from verifier-pool workers (they inherit
# sys.path).
sys.path.insert(0, str(Path(__file__).parent))

import support.run_env  # noqa: E402,F401  (the environment before any test: runs start from it)


def pytest_configure(config):
    # `make test-fast` leaves these out (-m "not slow"); `make test` and .ci/run run everything.
    config.addinivalue_line(
        "markers", "slow: a run of minutes (training through the CLI, a recipe in miniature, "
                   "a learning curve, a multi-process world); `make test-fast` leaves it out")
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
    vLLM or Megatron once (mindrl/platforms/preload.py, docs/platforms.md#process-start-up).
    Left out where the session runs no slow test (those start runs), or with
    MINDRL_PRELOAD=0."""
    from mindrl.platforms import preload
    from mindrl.workers import preload_servers

    slow = any(item.get_closest_marker("slow") for item in request.session.items)
    if os.environ.get("MINDRL_PRELOAD") == "0" or not slow:
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
