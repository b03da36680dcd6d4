"""The environment every test session runs in: offline hub, one torch thread per process
(docs/platforms.md#one-torch-thread-per-process), local single-user Ray. One table, applied by
tests/conftest.py and by tests/support/suite.py before it starts the suite's preload servers:
a server imports with the environment its requests will carry
(mindrl/platforms/preload/environment.py)."""

import os

DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Test clusters are local and single-user. Ray 2.60 turns token auth on by default once a
    # token exists in ~/.ray (any earlier Ray may leave one), and then `ray start` nodes of a
    # test cluster refuse each other ("InvalidAuthToken").
    "RAY_AUTH_MODE": "disabled",
}


def apply() -> None:
    """Each default where the caller's environment has no value of its own."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
