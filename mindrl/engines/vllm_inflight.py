"""An engine that takes new weights while it generates (rl_config.inflight_sync).

The sync writes into a second buffer, never into the weights a decode step reads: a /dev/shm
file with a place for every HF tensor (with shared CPU weights, the same layout as vLLM's
shared file, so the actor's ranks write into it as they would into vLLM's). Buckets and
tensors handed over are copied into it as they arrive, while the engine keeps decoding; the
sync's last call (`weights_written`) commits: between two decode steps (engines/step_gate.py)
the buffer goes into vLLM's weights in one piece, so no step ever computes with half of one
version and half of another. What happens to the requests running then is the mode:

  - ``keep_kv`` (PipelineRL's in-flight update): they continue on the new weights with the
    KV cache their earlier tokens computed on older ones;
  - ``recompute_kv``: vLLM preempts them (Scheduler.reset_prefix_cache with
    reset_running_requests), so their prompt and tokens so far are prefilled again on the new
    weights before the next token: every later token is the new policy's given its prefix,
    the same numbers an abort and resume would give (rl_config.partial_rollout_tokens),
    without leaving the engine. The prefix cache is reset too.

Models with images are refused: vLLM's encoder cache cannot be reset while requests that use
it run.

`commits` counts the versions taken in; a generate records it for every token it streams
(engines/vllm_stoppable.py), so each token says which weights sampled it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch

from mindrl import shared_memory
from mindrl.engines.step_gate import StepGate
from mindrl.platforms import device_ipc
from mindrl.platforms.cpu.vllm_shared_weights import SharedWeights

MODES = ("keep_kv", "recompute_kv")


class InflightWeights:
    """The staging buffer, the gate and the count of versions taken in, for one engine."""

    def __init__(self, mode: str, hf_shapes: Dict[str, Tuple[int, ...]], dtype: torch.dtype,
                 shared: Optional[SharedWeights], timeout_s: Optional[float] = None):
        """`mode` one of MODES (check_inflight refuses others first). `shared`: vLLM's shared
        weights, mapped here once for every commit's copy."""
        self.mode, self.timeout_s = mode, timeout_s
        self.gate = StepGate()
        self.commits = 0
        path = shared_memory.shm_path(shared_memory.VLLM_STAGING, os.getpid(), "inflight")
        if shared is not None:        # the actor's ranks write here as into vLLM's own file
            self.record = dataclasses.replace(shared, path=path)
        else:
            places, offset = {}, 0
            for name in sorted(hf_shapes):
                shape = tuple(hf_shapes[name])
                places[name] = (offset, shape)
                offset += math.prod(shape)
            self.record = SharedWeights(path, max(offset, 1), dtype, places)
        self.region = shared_memory.SharedRegion(path, self.record.numel, self.record.dtype,
                                                 create=True)
        self._live = (None if shared is None else
                      shared_memory.SharedRegion(shared.path, shared.numel, shared.dtype,
                                                 create=False))
        self._staged: Set[str] = set()

    def run(self, work: Callable[[], object]) -> object:
        """`work()` on vLLM between two decode steps (at once when none runs), waiting at
        most `timeout_s` for the running step to end."""
        return self.gate.run(work, self.timeout_s)

    def _view(self, name: str) -> torch.Tensor:
        offset, shape = self.record.place(name)
        return self.region.tensor[offset:offset + math.prod(shape)].view(shape)

    def stage(self, pairs: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Tensors under the engine's names into the buffer (the engine keeps decoding)."""
        for name, tensor in pairs:
            self._view(name).copy_(tensor)
            self._staged.add(name)

    def stage_bucket(self, path, numel: int, dtype: torch.dtype,
                     entries: List[Tuple[str, int, Tuple[int, ...]]]) -> None:
        """A shared bucket's tensors (HF name, element offset, shape) into the buffer."""
        flat = device_ipc.open_bucket(path, numel, dtype)
        self.stage(device_ipc.views(flat, entries))
        device_ipc.finish_reading(path)

    def commit(self, load_bucket: Callable[..., None]) -> None:
        """The staged version into vLLM's weights (call it between two decode steps):
        `load_bucket(path, numel, dtype, entries)` loads the staged tensors through vLLM's
        loaders; with shared weights the buffer is copied into vLLM's file whole."""
        if self._live is not None:
            self.copy_into_shared()
        else:
            load_bucket(self.record.path, self.record.numel, self.record.dtype,
                        self.take_entries())
        self.commits += 1

    def take_entries(self) -> List[Tuple[str, int, Tuple[int, ...]]]:
        """The staged tensors as bucket entries of the buffer, and the buffer emptied."""
        names, self._staged = sorted(self._staged), set()
        return [(name, *self.record.place(name)) for name in names]

    def copy_into_shared(self) -> None:
        """With shared weights: the whole buffer into vLLM's file (the same layout)."""
        self._live.tensor.copy_(self.region.tensor)
        self._staged = set()

    def close(self) -> None:
        """Remove the buffer's file and drop the mapping of vLLM's (vLLM removes that file)."""
        self.region.close()
        self._live = None


def check_inflight(mode: Optional[str], generate_config, multimodal: bool = False) -> None:
    """Refuse an engine that could not take weights in while generating (the run's checks,
    config/checks/asynchronous.py, refuse the same by key before anything starts)."""
    if not mode:
        return
    if mode not in MODES:
        raise ValueError(f"inflight_sync={mode!r}: use one of {MODES}")
    if multimodal:
        raise ValueError("inflight_sync: not for a model with images (vLLM's encoder cache "
                         "cannot be reset while requests that use it run)")
    if generate_config.infer_tensor_parallel_size > 1:
        raise ValueError("inflight_sync: built for engines at infer TP 1 (at TP > 1 vLLM's "
                         "workers are processes of their own; not tested)")
    if mode == "keep_kv" and generate_config.enable_prefix_caching:
        raise ValueError("inflight_sync keep_kv keeps requests running across a sync, so "
                         "vLLM cannot reset its prefix cache then: set enable_prefix_caching: "
                         "false, or inflight_sync: recompute_kv")
