"""Test-wide settings: offline hub, one torch thread per process (PLATFORM_NOTES); the `slow`
marker."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

torch.set_num_threads(1)

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Shared test helpers (tests/hf_reference.py) importable from every test folder and from
# spawned ranks, which inherit sys.path.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config):
    # `make test-fast` leaves these out (-m "not slow"); `make test` and .ci/run run everything.
    config.addinivalue_line(
        "markers", "slow: a run of minutes (training through the CLI, a recipe in miniature, "
                   "a learning curve, a multi-process world); `make test-fast` leaves it out")
