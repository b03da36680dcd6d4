"""Shared-memory regions: what one process writes another reads, and leftovers are swept."""

import os
import subprocess
import sys

import torch

from mindrl.engines.shm_region import SHM_DIR, SharedRegion, sweep_stale


def test_a_region_is_the_same_memory_in_every_mapping():
    path = os.path.join(SHM_DIR, f"mindrl-test-{os.getpid()}-a")
    owner = SharedRegion(path, 8, torch.float32, create=True)
    other = SharedRegion(path, 8, torch.float32, create=False)
    other.tensor.copy_(torch.arange(8.0))
    assert torch.equal(owner.tensor, torch.arange(8.0))
    del owner, other
    assert not os.path.exists(path)          # the creator unlinks it when dropped


def test_sweep_unlinks_only_files_of_dead_processes():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = os.path.join(SHM_DIR, f"mindrl-test-{dead}-3")
    live = os.path.join(SHM_DIR, f"mindrl-test-{os.getpid()}-3")
    other = os.path.join(SHM_DIR, f"mindrl-testx-{dead}")
    for path in (stale, live, other):
        open(path, "wb").close()
    try:
        sweep_stale("mindrl-test")
        assert not os.path.exists(stale)
        assert os.path.exists(live) and os.path.exists(other)
    finally:
        for path in (stale, live, other):
            if os.path.exists(path):
                os.unlink(path)
