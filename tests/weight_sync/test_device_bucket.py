"""The device-bucket transport (CUDA IPC): Megatron's weights reach another process's device
tensors without a host round trip, verified by fingerprints at every sync.

Runs where the device shares buffers between processes (CUDA); skipped on CPU, where the
bucket is a /dev/shm file and tests/weight_sync/test_resharding.py proves that transport.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from mindrl import device

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

pytestmark = pytest.mark.skipif(
    not device.shares_device_buffers(),
    reason=f"no device IPC handles on {device.device_type()} (CPU buckets are /dev/shm files: "
           f"test_resharding.py)")


@pytest.fixture(scope="module")
def figures():
    from bench.device.bench_device_ipc import run_syncs
    from mindrl.config.model_spec import load_model_spec

    device.init_distributed(0, 1)
    spec = dataclasses.replace(load_model_spec("tiny-qwen2"))
    # Small buckets (two halves of 0.3 MiB, the largest tensor 0.25 MiB): four or so per
    # sync, so the two buffers take turns and their reuse is exercised.
    return run_syncs(spec, "float32", bucket_mb=0.6, syncs=4)


def test_the_sync_takes_the_device_bucket_and_every_verified_sync_passes(figures):
    assert figures["transport"] == "device_bucket"
    assert figures["verified_syncs"] == 2           # the first and the last, after moves
    assert figures["buckets_per_sync"] > 2


def test_the_receiver_opens_each_buffer_once_whatever_the_syncs(figures):
    assert figures["receiver_opens_after_first"] == 2      # the two halves
    assert figures["receiver_opens"] == 2                  # reused by the next three syncs
    assert figures["receiver_open_buckets"] == 2


def test_the_sender_holds_at_most_its_two_buffers_beyond_its_weights(figures):
    """Two buffers of half a bucket each, one grown where a module is larger (modules are
    never split); the verification's fp32 probes add slabs of at most 64 MiB."""
    two_buffers = 2 * figures["largest_bucket_bytes"]
    assert figures["largest_bucket_bytes"] * 2 <= 2 * figures["bucket_bytes"], figures
    assert figures["sender_kept_bytes"] <= two_buffers + 4096, figures
    assert figures["sender_peak_over_weights_bytes"] <= two_buffers + 2**20, figures
