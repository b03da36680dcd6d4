"""The environment a test starts a run in: the test process's, less what an in-process vLLM
engine left in it.

vLLM's CPU platform sets LD_PRELOAD (libgomp, tcmalloc) and its own VLLM_* settings in the
environment of the process that builds an engine, and tests build engines in the pytest process.
A run started from that process afterwards inherited them (every process of it preloaded
libgomp) where a user's shell has none, and its processes no longer matched the preload servers'
environment (they started plainly: mindrl/platforms/preload/environment.py). tests/conftest.py
imports this module first, before any test runs.
"""

import os
import sys

SESSION_ENV = dict(os.environ)
LEFT_BY_ENGINES = ("VLLM_", "LD_PRELOAD", "TORCHINDUCTOR_CPP_DYNAMIC_THREADS")


def leftovers() -> dict:
    """{name: its value at the session's start, or None} for what engines changed."""
    return {k: SESSION_ENV.get(k)
            for k in set(os.environ) | set(SESSION_ENV) if k.startswith(LEFT_BY_ENGINES)
            and os.environ.get(k) != SESSION_ENV.get(k)}


def for_a_run() -> dict:
    """This process's environment with the session's values for what engines changed."""
    env = dict(os.environ)
    for key, value in leftovers().items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def restore(monkeypatch) -> None:
    """For a test that starts workers from this process itself (ray.init here)."""
    for key, value in leftovers().items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)


PRELOAD_SERVERS = []    # [directory, servers or None (started outside)]: tests/conftest.py


def wait_for_preload() -> None:
    """Before the session's first run: until its preload servers are ready (their imports
    take 15-30 s), so that its workers fork instead of importing the same libraries beside
    them. Sessions without servers, and later calls, return at once."""
    if PRELOAD_SERVERS:
        from mindrl.workers import preload_servers

        directory, servers = PRELOAD_SERVERS
        preload_servers.wait_ready(directory, servers)
        PRELOAD_SERVERS.clear()


def python() -> str:
    """The interpreter a test runs a script with (`python SCRIPT ARGS`, an example script's
    PYTHON): where the session's preload servers run (tests/conftest.py), their wrapper, which
    forks it from the driver server with torch and transformers imported; else this one."""
    from mindrl.platforms import preload

    wait_for_preload()
    wrapper = preload.python_wrapper()
    return str(wrapper) if wrapper else sys.executable
