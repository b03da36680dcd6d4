"""A weight-sync target in another process that holds plain HF tensors on the device: the
receiving end of a device-bucket sync where no vLLM is installed (a GPU machine with torch
alone). It opens each bucket the way vLLM's workers do (`platforms/device_ipc.open_bucket`,
once per buffer, kept open across syncs), copies the views into its own tensors and
fingerprints them with the engines' own digest, so the resharder's verified sync checks it
as it checks vLLM. Used by tests/weight_sync/test_device_bucket.py and
bench/device/bench_device_ipc.py.
"""

from __future__ import annotations

import time
import traceback
from typing import Dict, Optional

import torch


class _Holder:
    """Child side: the HF tensors, the open buckets, and what it cost."""

    def __init__(self, device_index: int):
        torch.cuda.set_device(device_index)
        self.weights: Dict[str, torch.Tensor] = {}
        self.open: Dict[str, torch.Tensor] = {}
        self.opens = 0
        self.load_seconds = 0.0

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        from mindrl.platforms import device_ipc

        return device_ipc.sees(device_uuid)

    def load_weights_from_bucket(self, path, numel, dtype, entries) -> None:
        from mindrl.platforms import device_ipc

        t0 = time.perf_counter()
        key = device_ipc.bucket_key(path)
        flat = self.open.get(key)
        if flat is None or flat.numel() < numel:
            while len(self.open) >= 2:
                self.open.pop(next(iter(self.open)))
            flat = self.open[key] = device_ipc.open_bucket(path, numel, dtype)
            self.opens += 1
        for name, view in device_ipc.views(flat, entries):
            held = self.weights.get(name)
            if held is None:
                self.weights[name] = view.clone()
            else:
                held.copy_(view)
        device_ipc.finish_reading(path)
        self.load_seconds += time.perf_counter() - t0

    def release_bucket(self, path=None) -> None:
        from mindrl.platforms import device_ipc

        if path is None:
            self.open.clear()
        else:
            self.open.pop(device_ipc.bucket_key(path), None)

    def fingerprint(self):
        from mindrl.ckpt.fingerprint import fingerprint_tensors

        return fingerprint_tensors(self.weights.items())

    def check_fingerprint(self, expected, strict: bool = True) -> None:
        from mindrl.ckpt.fingerprint import compare_fingerprints
        from mindrl.errors import WeightSyncError

        dtype = next(iter(self.weights.values())).dtype
        problems = compare_fingerprints(self.fingerprint(), expected, dtype, strict)
        if problems:
            raise WeightSyncError("receiver: " + "; ".join(problems[:5]))

    def stats(self) -> dict:
        return {"opens": self.opens, "open_buckets": len(self.open),
                "load_seconds": self.load_seconds, "tensors": len(self.weights),
                "held_bytes": sum(t.numel() * t.element_size() for t in self.weights.values()),
                "allocated_bytes": torch.cuda.memory_allocated(),
                "max_allocated_bytes": torch.cuda.max_memory_allocated()}


def _serve(conn, device_index: int) -> None:
    holder = _Holder(device_index)
    conn.send(True)
    while True:
        message = conn.recv()
        if message is None:
            holder.open.clear()
            break
        method, args = message
        try:
            conn.send((True, getattr(holder, method)(*args)))
        except BaseException as exc:
            conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}\n"
                                           f"{traceback.format_exc()}")))


class DeviceReceiverProcess:
    """The WeightTarget members a device-bucket sync and its verification call, served by a
    spawned child on `device_index`."""

    shared_weights = None
    wants_shared_memory = False
    loads_in_background = True
    stages_weights = False

    def __init__(self, dtype: torch.dtype, device_index: int = 0):
        import torch.multiprocessing as mp

        self.dtype = dtype
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, device_index), daemon=True)
        self._proc.start()
        child.close()
        self._conn.recv()

    def _reply(self):
        ok, value = self._conn.recv()
        if not ok:
            raise value
        return value

    def _call(self, method: str, *args):
        self._conn.send((method, args))
        return self._reply()

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        return self._call("can_open_device_buffers", device_uuid)

    def load_weights_from_bucket(self, path, numel, dtype, entries) -> None:
        self._call("load_weights_from_bucket", path, numel, dtype, list(entries))

    def submit_load_from_bucket(self, path, numel, dtype, entries):
        self._conn.send(("load_weights_from_bucket", (path, numel, dtype, list(entries))))
        return self._reply

    def release_bucket(self, path: Optional[str] = None) -> None:
        self._call("release_bucket", path)

    def fingerprint(self):
        return self._call("fingerprint")

    def start_fingerprint(self) -> None:
        """Nothing early: the receiver digests when asked to check."""

    def check_fingerprint(self, expected, strict: bool = True) -> None:
        self._call("check_fingerprint", dict(expected), strict)

    def stats(self) -> dict:
        return self._call("stats")

    def close(self) -> None:
        if self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=30)
