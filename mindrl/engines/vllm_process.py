"""VLLMEngine in a spawned child process, for hosts that are Megatron ranks.

vLLM cannot share a process with an initialised torch.distributed world (it would join that
world and hang creating its groups). The child runs one VLLMEngine and serves its methods by
name over a pipe; tensors cross through torch's shared-memory pickling.
"""

from __future__ import annotations

import atexit
import traceback
from typing import Dict, List, Optional

import torch

from mindrl.ckpt.fingerprint import NamedTensors
from mindrl.config.schema import GenerateConfig
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.errors import WeightSyncError


def _serve(conn, model_path, generate_config, seed, kwargs) -> None:
    """Child body: one VLLMEngine, methods called by name over the pipe until None."""
    try:
        engine = VLLMEngine(model_path, generate_config, seed, **kwargs)
        conn.send((True, engine.describe()))
    except BaseException as exc:
        conn.send((False, RuntimeError(f"vLLM failed to start: {exc}\n{traceback.format_exc()}")))
        return
    while True:
        message = conn.recv()
        if message is None:
            engine.close(process_ends=True)   # its shared-memory files go, explicitly
            break
        method, args, kwargs = message
        try:
            conn.send((True, getattr(engine, method)(*args, **kwargs)))
        except BaseException as exc:
            if not isinstance(exc, (WeightSyncError, ValueError)):
                exc = RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            conn.send((False, exc))


class VLLMEngineProcess:
    """A VLLMEngine in a spawned child process, with the same methods.

    For processes that belong to a torch.distributed world (a Megatron rank). Tensors cross
    through torch's shared-memory pickling: a tensor whose storage is already shared (the
    resharder's bucket buffer) crosses without a copy. A weight-sync target
    (weight_sync/target.py).
    """

    wants_shared_memory = True
    loads_in_background = True    # the child loads while this process fills the next bucket
    stages_weights = False        # loads land at once (the child is idle during a sync)

    def __init__(self, model_path, generate_config: GenerateConfig, seed: int = 0, **kwargs):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # A daemonic process may not start children, and vLLM's TP workers are children.
        sharded = generate_config.model_parallel_size > 1
        self.process = ctx.Process(target=_serve, daemon=not sharded,
                                   args=(child, str(model_path), generate_config, seed, kwargs))
        self._digesting = False        # a start_fingerprint reply not yet read
        self.process.start()
        if sharded:
            atexit.register(self.close)
        child.close()
        info = self._reply()
        self.dtype, self.hf_shapes, self.module_of = (info["dtype"], info["hf_shapes"],
                                                      info["module_of"])
        self.load_mode, self.shared_weights = info["load_mode"], info["shared_weights"]

    def _reply(self):
        try:
            ok, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the vLLM process exited (code {self.process.exitcode})") from None
        if not ok:
            raise value
        return value

    def _send(self, method: str, *args, **kwargs) -> None:
        if self._digesting:               # read start_fingerprint's reply (raising its error)
            self._digesting = False
            self._reply()
        self._conn.send((method, args, kwargs))

    def _call(self, method: str, *args, **kwargs):
        self._send(method, *args, **kwargs)
        return self._reply()

    def generate(self, prompt_token_ids, n: int = 1, **sampling_overrides) -> RolloutOutput:
        return self._call("generate", prompt_token_ids, n, **sampling_overrides)

    def score(self, prompt_token_ids, response_token_ids) -> List[List[float]]:
        return self._call("score", prompt_token_ids, response_token_ids)

    def load_weights(self, weights: NamedTensors) -> None:
        self._call("load_weights", list(weights))

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        return self._call("can_open_device_buffers", device_uuid)

    def load_weights_from_bucket(self, path, numel: int, dtype: torch.dtype,
                                 entries) -> None:
        """The child opens the shared bucket itself: only names, offsets and shapes cross."""
        self._call("load_weights_from_bucket", path, numel, dtype, list(entries))

    def weights_written(self) -> None:
        self._call("weights_written")

    def invalidate(self, reason: str) -> None:
        self._call("invalidate", reason)

    def submit_load_from_bucket(self, path, numel: int, dtype: torch.dtype, entries):
        """Start `load_weights_from_bucket` in the child and return at once; call the returned
        function to wait for it (and raise its error). Nothing else may be called meanwhile."""
        self._send("load_weights_from_bucket", path, numel, dtype, list(entries))
        return self._reply

    def release_bucket(self, path: Optional[str] = None) -> None:
        self._call("release_bucket", path)

    def fingerprint(self) -> Dict[str, torch.Tensor]:
        return self._call("fingerprint")

    def start_fingerprint(self) -> None:
        """The child digests its weights while this process goes on; the next call reads the
        reply first."""
        self._send("start_fingerprint")
        self._digesting = True

    def check_fingerprint(self, expected, strict: bool = True) -> None:
        self._call("check_fingerprint", dict(expected), strict)

    def sleep(self) -> bool:
        return self._call("sleep")

    def wake_up(self, tags=None) -> None:
        self._call("wake_up", tags)

    def close(self) -> None:
        if self._conn.closed:
            return
        if self.process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
        self._conn.close()
