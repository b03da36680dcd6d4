"""What a weight sync feeds: the one interface every engine side implements.

Implemented by `VLLMEngine` (vLLM in this process), `VLLMEngineProcess` (vLLM in a child
process), `EngineFanout` (every engine of a node, through Ray) and `RelayTarget` (the host's
node and, through their receivers, the other nodes). The transports (weight_sync/*.py) and
the first-sync check (trainer/first_sync.py) call these members and no others; engines/
implements them without importing this module (the layers below weight_sync cannot).
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Protocol, Sequence, Tuple, runtime_checkable

import torch

from mindrl.platforms.device_ipc import BucketRef

Entry = Tuple[str, int, Tuple[int, ...]]     # HF name, element offset in a file, shape


@runtime_checkable
class WeightTarget(Protocol):
    dtype: torch.dtype              # what the engines compute in: the wire dtype
    shared_weights: Optional[object]   # platforms/cpu/vllm_shared_weights.SharedWeights, or None
    wants_shared_memory: bool       # tensors handed over should live in shared memory
    loads_in_background: bool       # submit_load_from_bucket returns before the load ends
    # Loads go to a second buffer that `weights_written` takes in between two decode steps
    # (rl_config.inflight_sync): the sync's last call, whatever the transport.
    stages_weights: bool

    def load_weights(self, weights) -> None:
        """HF-named tensors (every tensor of each vLLM module they touch) into the engines."""

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        """Every engine can open buffers on that device in place (IPC handles): the sync may
        hand over device buckets."""

    def load_weights_from_bucket(self, bucket: BucketRef, numel: int, dtype: torch.dtype,
                                 entries: Sequence[Entry]) -> None:
        """The same, from a shared bucket every engine opens itself: a /dev/shm file's path,
        or a device buffer (`platforms/device_ipc.DeviceBuffer`)."""

    def submit_load_from_bucket(self, bucket: BucketRef, numel: int, dtype: torch.dtype,
                                entries: Sequence[Entry]) -> Callable[[], None]:
        """Start `load_weights_from_bucket`; the returned function waits for it."""

    def release_bucket(self, bucket: Optional[BucketRef] = None) -> None:
        """Close one bucket the engines keep open, or all of them (None)."""

    def weights_written(self) -> None:
        """New weights were written straight into `shared_weights`: drop what depends on them."""

    def invalidate(self, reason: str) -> None:
        """The weights were left half-written: the engines refuse all further work."""

    def fingerprint(self) -> Dict[str, torch.Tensor]:
        """{HF name: digest} of the weights the (first) engine computes with."""

    def start_fingerprint(self) -> None:
        """Let the engines digest their weights now, without waiting: the weights do not change
        before the next `check_fingerprint`, which then compares (a verified sync overlaps
        the engines' digest with the actor's expected fingerprints)."""

    def check_fingerprint(self, expected: Mapping[str, torch.Tensor],
                          strict: bool = True) -> None:
        """Every engine against `expected`; WeightSyncError naming what differs."""
