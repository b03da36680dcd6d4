"""Move a model's (and optimizer's) tensor storages to host memory and back, in place.

Works on storages, not tensors: Megatron's params and grads are views into contiguous
buffers, so offloading each unique storage once covers every view and keeps them valid.
The device storage is resized to 0 (memory freed) and restored on onload; the same path
runs on CPU, CUDA and NPU, only the saving differs (none on CPU).
"""

from __future__ import annotations

from typing import Dict, Iterable, List

import torch


def unique_storages(tensors: Iterable[torch.Tensor]) -> List[torch.UntypedStorage]:
    seen: Dict[int, torch.UntypedStorage] = {}
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        s = t.untyped_storage()
        if s.nbytes() and s.data_ptr() not in seen:
            seen[s.data_ptr()] = s
    return list(seen.values())


class StorageOffloader:
    """Holds host copies of offloaded storages; onload restores them bit for bit."""

    def __init__(self) -> None:
        self._held: List[tuple] = []

    @property
    def offloaded(self) -> bool:
        return bool(self._held)

    def offload(self, tensors: Iterable[torch.Tensor]) -> int:
        """Copy to host and free the device storage; returns bytes freed."""
        freed = 0
        for storage in unique_storages(tensors):
            host = torch.UntypedStorage(storage.nbytes(), device="cpu")
            host.copy_(storage)
            freed += storage.nbytes()
            storage.resize_(0)
            self._held.append((storage, host))
        return freed

    def onload(self) -> int:
        restored = 0
        for storage, host in self._held:
            storage.resize_(host.nbytes())
            storage.copy_(host)
            restored += host.nbytes()
        self._held.clear()
        return restored


def optimizer_state_tensors(optimizer) -> List[torch.Tensor]:
    """Adam moments and fp32 main params of a Megatron optimizer (chained or not)."""
    out: List[torch.Tensor] = []
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(opt, "optimizer", opt)
        for state in inner.state.values():
            out.extend(v for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        for group in inner.param_groups:
            out.extend(group["params"])
    return out
