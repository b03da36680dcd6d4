"""Shared-memory regions: what one process writes another reads, a creator removes its file
when told to, and files of processes that are gone are swept, under every MindRL prefix."""

import os
import signal
import subprocess
import sys

import pytest
import torch

from mindrl.processes import pid_alive
from mindrl.shared_memory import (PREFIXES, SHM_DIR, SharedRegion, creator_pid, shm_path,
                                  sweep_stale)


def test_a_region_is_the_same_memory_in_every_mapping():
    path = os.path.join(SHM_DIR, f"mindrl-test-{os.getpid()}-a")
    owner = SharedRegion(path, 8, torch.float32, create=True)
    other = SharedRegion(path, 8, torch.float32, create=False)
    other.tensor.copy_(torch.arange(8.0))
    assert torch.equal(owner.tensor, torch.arange(8.0))
    del owner, other
    assert not os.path.exists(path)          # the creator unlinks it when dropped


def test_close_removes_the_file_while_mappings_stay_readable():
    owner = SharedRegion(os.path.join(SHM_DIR, f"mindrl-test-{os.getpid()}-b"), 4,
                         torch.float32, create=True)
    reader = SharedRegion(owner.path, 4, torch.float32, create=False)
    owner.tensor.fill_(3.0)
    owner.close()
    assert not os.path.exists(owner.path)
    assert reader.tensor.tolist() == [3.0] * 4
    reader.close()                           # not its creator: nothing to remove
    owner.close()                            # twice is fine


def test_sweep_unlinks_only_files_of_dead_processes():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = os.path.join(SHM_DIR, f"mindrl-test-{dead}-3")
    live = os.path.join(SHM_DIR, f"mindrl-test-{os.getpid()}-3")
    other = os.path.join(SHM_DIR, f"mindrl-testx-{dead}")
    for path in (stale, live, other):
        open(path, "wb").close()
    try:
        assert sweep_stale(["mindrl-test"]) == [stale]
        assert os.path.exists(live) and os.path.exists(other)
    finally:
        for path in (stale, live, other):
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.alone      # a concurrent run's start-up sweep would take the files first
def test_a_killed_creator_leaves_files_under_every_prefix_and_one_sweep_takes_them():
    """SIGKILL runs no finalizer: each prefix's file stays until the next sweep."""
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, torch\n"
         "from mindrl.shared_memory import PREFIXES, SharedRegion, shm_path\n"
         "regions = [SharedRegion(shm_path(p, os.getpid(), 1), 16, torch.float32, True)\n"
         "           for p in PREFIXES]\n"
         "print(os.getpid(), flush=True)\n"
         "sys.stdin.read()\n"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()
    left = [shm_path(prefix, pid, 1) for prefix in PREFIXES]
    assert all(map(os.path.exists, left))
    swept = sweep_stale()
    assert set(left) <= set(swept)
    # Anything else swept is another dead process's (tests may share the machine), never a
    # live one's.
    assert not [path for path in swept if pid_alive(creator_pid(path))], swept
    assert not any(map(os.path.exists, left))
