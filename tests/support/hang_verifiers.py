"""Misbehaving verifiers for the pool tests, imported by module name in the workers.

Pool workers are fresh processes: they find these only through
`worker_imports=["support.hang_verifiers"]` (tests/conftest.py puts tests/ on sys.path, and
workers inherit the parent's sys.path).
"""

import os
import time

from mindrl.rewards import register_verifier


def _note_pid(extra):
    if extra.get("pid_file"):
        with open(extra["pid_file"], "w") as f:
            f.write(str(os.getpid()))


@register_verifier("test_sleep_forever")
def sleep_forever(completion, label, **extra):
    _note_pid(extra)
    while True:
        time.sleep(3600)


@register_verifier("test_exit")
def exit_process(completion, label, **extra):
    _note_pid(extra)
    os._exit(1)


@register_verifier("test_raise")
def raise_error(completion, label, **extra):
    raise RuntimeError("verifier bug")


@register_verifier("test_nan")
def not_a_number(completion, label, **extra):
    return float("nan")


@register_verifier("test_alloc")
def allocate(completion, label, **extra):
    return float(len(bytearray(int(extra["mb"]) * 2**20)))


@register_verifier("test_pid")
def worker_pid(completion, label, **extra):
    return float(os.getpid())
