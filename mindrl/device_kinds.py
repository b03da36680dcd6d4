"""The device kinds MindRL runs on, as a torch-free table that device.py, config/ and workers/
all read: the collective backend of each kind, the recipe key that counts its devices, and
the Ray resource that stands for one device (with what one rank of it asks Ray for)."""

from __future__ import annotations

DEVICE_TYPES = ("npu", "cuda", "cpu")
ALIASES = {"gpu": "cuda", "npu": "npu", "cuda": "cuda", "cpu": "cpu"}
BACKENDS = {"npu": "hccl", "cuda": "nccl", "cpu": "gloo"}
# rl_config.*_resource key that counts devices of each kind.
RESOURCE_KEYS = {"npu": "num_npus", "cuda": "num_gpus", "cpu": "num_cpus"}
KIND_OF_RESOURCE_KEY = {key: kind for kind, key in RESOURCE_KEYS.items()}
# The Ray resource name that stands for one device of each kind.
RAY_RESOURCE = {"npu": "NPU", "cuda": "GPU", "cpu": "CPU"}


def placement_bundle(kind: str) -> dict:
    """One device's placement-group bundle: the device, plus one CPU for its process (on CPU
    the device is the CPU slot itself)."""
    name = RAY_RESOURCE[kind]
    return {"CPU": 1} if kind == "cpu" else {name: 1, "CPU": 1}


def rank_resources(kind: str, share: float) -> dict:
    """Ray actor options for one rank taking `share` of a device of `kind` (Ray has keyword
    arguments for CPUs and GPUs, a custom resource for the rest)."""
    if kind == "cpu":
        return {"num_cpus": share}
    if kind == "cuda":
        return {"num_gpus": share, "num_cpus": share}
    return {"resources": {RAY_RESOURCE[kind]: share}, "num_cpus": share}
