"""Every rollout engine as one target of the weight sync.

The weight sync (weight_sync/resharder.py) feeds one target (weight_sync/target.py) from the
actor's host rank. `EngineFanout` is that target for a group of engines reached through Ray: each call goes to
every engine at once and returns when all have finished. The bytes exist once per node:
a shared-memory bucket is a file every engine maps itself (only its name, offsets and shapes
cross), and tensors handed over directly are put in Ray's object store once for all engines.
Fingerprints are checked inside each engine, so only digests cross processes.

A failure names the engine: `WeightSyncError("rollout engine 2: ...")`, or `EngineDied` when
the engine's process is gone.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch

from mindrl.errors import EngineDied, WeightSyncError, ray_result
from mindrl.weight_sync.target import Entry


class EngineFanout:
    """The resharder's target over Ray handles of `VLLMEngine` actors."""

    wants_shared_memory = False    # tensors cross through Ray's object store, not torch's
    loads_in_background = True     # every engine loads at once, in its own process

    def __init__(self, engines: Sequence[Any], indices: Optional[Sequence[int]] = None):
        """`indices`: each engine's index in the run's rollout group (a relay's fan-out holds
        a subset), so that an error names the engine as the run's failure report does."""
        if not engines:
            raise ValueError("EngineFanout needs at least one engine")
        self.engines = list(engines)
        self._digests: List[Any] = []      # start_fingerprint's calls, awaited by the check
        self._group: Dict[str, str] = {}     # the engines' concurrency group for sync calls
        self.indices = list(indices) if indices is not None else list(range(len(engines)))
        infos = self._wait(self._submit("describe"), "describe")
        dtypes = {info["dtype"] for info in infos}
        if len(dtypes) != 1:
            raise WeightSyncError(f"rollout engines disagree on their dtype: "
                                  f"{sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop()
        # Engines that take a sync in while generating (rl_config.inflight_sync) get its
        # calls on their "sync" concurrency group: the default one is busy generating.
        self.stages_weights = all(info.get("stages_weights", False) for info in infos)
        self._group = {"concurrency_group": "sync"} if self.stages_weights else {}
        # vLLM's shared weights are one engine's own parameters: with several engines every
        # sync goes through the shared bucket instead (validation refuses the combination).
        self.shared_weights = infos[0]["shared_weights"] if len(infos) == 1 else None
        # Such an engine notices new shared weights at its next generate (the driver's
        # version), so the sync's `weights_written` call can be left out.
        self.resets_lazily = len(infos) == 1 and bool(infos[0].get("resets_lazily"))

    def _method(self, engine, method: str):
        call = getattr(engine, method)
        return call.options(**self._group) if self._group else call

    def _submit(self, method: str, *args) -> List[Any]:
        return [self._method(engine, method).remote(*args) for engine in self.engines]

    def _wait(self, refs: List[Any], method: str) -> List[Any]:
        return [ray_result(ref, f"rollout engine {index}", method, died=EngineDied,
                           failed=WeightSyncError) for index, ref in zip(self.indices, refs)]

    def _all(self, method: str, *args) -> List[Any]:
        return self._wait(self._submit(method, *args), method)

    # ---------------------------------------------------------------- WeightTarget

    def load_weights(self, weights) -> None:
        import ray

        self._all("load_weights", ray.put(list(weights)))

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        """Every engine of the node sees that device (Ray gives an engine its own devices
        only, unless the node's devices are all visible to it)."""
        return all(self._all("can_open_device_buffers", device_uuid))

    def load_weights_from_bucket(self, bucket, numel: int, dtype: torch.dtype,
                                 entries: Sequence[Entry]) -> None:
        self._all("load_weights_from_bucket", bucket, numel, dtype, list(entries))

    def submit_load_from_bucket(self, bucket, numel: int, dtype: torch.dtype,
                                entries) -> Callable[[], None]:
        """Start the load on every engine; the returned function waits for all of them."""
        refs = self._submit("load_weights_from_bucket", bucket, numel, dtype, list(entries))

        def wait() -> None:
            self._wait(refs, "load_weights_from_bucket")

        return wait

    def release_bucket(self, path: Optional[str] = None) -> None:
        self._all("release_bucket", path)

    def fingerprint(self) -> Dict[str, torch.Tensor]:
        """The first engine's (between syncs the engines hold the same weights;
        `check_fingerprint` checks each)."""
        return self._wait([self._method(self.engines[0], "fingerprint").remote()],
                          "fingerprint")[0]

    def start_fingerprint(self) -> None:
        """Every engine digests its weights now, while the caller computes the expected
        fingerprints; `check_fingerprint` waits for these (and raises their errors)."""
        self._digests = self._submit("start_fingerprint")

    def check_fingerprint(self, expected: Mapping[str, torch.Tensor],
                          strict: bool = True) -> None:
        import ray

        started, self._digests = self._digests, []
        self._wait(started, "start_fingerprint")
        self._all("check_fingerprint", ray.put(dict(expected)), strict)

    def submit_check(self, expected: Mapping[str, torch.Tensor],
                     strict: bool = True) -> Callable[[], None]:
        """`check_fingerprint` started on every engine (after the digests `start_fingerprint`
        began); the returned function waits for the verdicts and raises the first failure.
        The engines' weights must not change before it is called (the next sync waits)."""
        import ray

        started, self._digests = self._digests, []
        refs = self._submit("check_fingerprint", ray.put(dict(expected)), strict)

        def verdict() -> None:
            self._wait(started, "start_fingerprint")
            self._wait(refs, "check_fingerprint")

        return verdict

    def weights_written(self) -> None:
        self._all("weights_written")

    def invalidate(self, reason: str) -> None:
        self._all("invalidate", reason)
