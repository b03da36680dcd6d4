"""The rollout engine: a real vLLM ``LLM`` started from an HF directory.

Three jobs, kept apart below:
- generate: token-id prompts in, responses and the sampled tokens' log-probs out
  (`rollout_output.RolloutOutput`); a generate given a `stop_id` ends after the engine step
  where `stop_generating` names it (`vllm_stoppable`: a weight sync stops partial rollouts).
- load weights in place, by the loader `vllm_weights.load_mode` picks (on CPU: into oneDNN's
  packed weights or plain parameters; elsewhere vLLM's ``reload_weights``) through
  ``collective_rpc`` (an iterator at infer TP 1, a shared file the TP workers map above),
  then drop every cache of the old weights (prefix, multimodal encoder: `_weights_changed`).
  HF names are renamed by vLLM's own mapper (`engine_name`: a VL model's language model lives
  under `language_model.`). Any failure is fatal (`WeightSyncError`): vLLM may hold
  half-loaded weights and must not generate again.
- fingerprint: a cheap per-HF-tensor digest of the weights vLLM is really computing with,
  derived from vLLM's own fused-module metadata (not from mindrl/ckpt/mapping/), so that a
  wrong mapping entry shows up as a mismatch against an independent reference.

vLLM runs in-process (at infer TP > 1 its mp executor's workers are processes of their own),
never beside an initialised torch.distributed world (it would join it and hang): the trainer
runs engines as Ray actors (mindrl/rollout), tests beside a rank use `vllm_process`. What vLLM
is given is `vllm_settings`; shared CPU weights, `platforms/cpu/vllm_shared_weights`; MoE
routes, `vllm_routes`; weights taken in while generating (rl_config.inflight_sync),
`vllm_inflight`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch

from mindrl import device, shared_memory, startup
from mindrl.ckpt.fingerprint import NamedTensors
from mindrl.config.schema import GenerateConfig
from mindrl.engines import vllm_routes, vllm_weights
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.engines.vllm_engine_fingerprints import EngineFingerprints
from mindrl.engines.vllm_fingerprint import combine_views
from mindrl.engines.vllm_fingerprint import vllm_view as _vllm_view
from mindrl.engines.vllm_inflight import InflightWeights, check_inflight
from mindrl.engines.vllm_settings import (PER_PROMPT, configure_environment, llm_kwargs,
                                          per_prompt_params, requests, sampling_params,
                                          worker_start)
from mindrl.engines.vllm_stoppable import SharedSteps, generate_stoppable
from mindrl.errors import WeightSyncError
from mindrl.platforms import device_ipc
from mindrl.platforms.cpu.vllm_shared_weights import SharedWeights, prefix_renames
from mindrl.processes import this_node


# ---------------------------------------------------------------------------- the engine

class _NameTracker:
    """Iterates (name, tensor) pairs and remembers the last name handed to vLLM."""

    def __init__(self, pairs):
        self.pairs, self.last = pairs, None

    def __iter__(self):
        for name, tensor in self.pairs:
            self.last = name
            yield name, tensor


class VLLMEngine(EngineFingerprints):
    """vLLM in this process. The process must not be part of a torch.distributed world.
    A weight-sync target (weight_sync/target.py)."""

    wants_shared_memory = False   # weights are handed over by reference
    loads_in_background = False   # a load runs in the caller's thread
    inflight: Optional[InflightWeights] = None   # with inflight_sync (set once vLLM is up)

    def __init__(self, model_path, generate_config: GenerateConfig, seed: int = 0,
                 logprobs_mode: str = "processed_logprobs", plain_cpu_linears: bool = False,
                 load_mode: Optional[str] = None, share_weights: bool = False,
                 actor_dtype: Optional[str] = None, inflight_sync: Optional[str] = None,
                 gate_timeout_s: Optional[float] = None, routes: bool = False,
                 **llm_overrides):
        """`logprobs_mode` "processed_logprobs": the log-probs of the distribution actually
        sampled from (after temperature), what the actor's temperature-scaled log-probs
        reproduce; vLLM's default "raw_logprobs" ignores the temperature.
        plain_cpu_linears (CPU only): keep linear weights unpacked (platforms/cpu/
        vllm_loaders.use_plain_linears) so a weight update is one copy, at the price of
        decode speed: torch's fp32 GEMM against oneDNN's packed one, qwen2.5-0.5b shape, 1
        thread, 64 sequences: 71 vs 88 tokens/s (75M shape, 2 threads: 375 vs 316). Off by
        default.
        load_mode: None picks the fastest loader that fits the model
        (`vllm_weights.load_mode`); "reload" forces vLLM's own reload.
        share_weights (CPU, with plain_cpu_linears): vLLM's parameters move into a shared
        file that the actor's ranks write straight into (`vllm_weights.share_weights`);
        `shared_weights` then says where each HF tensor lives.
        actor_dtype: what the run's actor computes in; vLLM's CPU build computes in bf16
        only beside a bf16 actor (None: float32).
        inflight_sync (keep_kv / recompute_kv): weights handed over are staged and taken in
        between two decode steps, while generates run (`vllm_inflight`); a sync's calls then
        wait at most `gate_timeout_s` for a step to end.
        routes: the run asks for MoE routes (`generate(with_routes=True)`); where the build
        returns them (`vllm_settings.returned_routes`) vLLM is started to, else the workers
        capture them."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            raise RuntimeError(
                "vLLM cannot start in a process that is part of a torch.distributed world (it "
                "would join it and hang creating its groups); use VLLMEngineProcess here")
        configure_environment(generate_config.cpu_threads)
        from vllm import LLM

        self.config = generate_config
        build = device.vllm_build()
        kwargs = llm_kwargs(generate_config, seed, logprobs_mode, build, actor_dtype, routes)
        # vLLM hands each sample's routes back itself (else vllm_routes captures them).
        self.returns_routes = bool(kwargs.get("enable_return_routed_experts"))
        kwargs.update(llm_overrides)
        if plain_cpu_linears:
            build.use_plain_linears()
        self.llm = LLM(model=str(model_path), **kwargs)
        self.build, self._segments = build, build.engine_segments()   # removed at close
        self.dtype = self.llm.collective_rpc(vllm_weights.model_dtype)[0]
        modes = set(self.llm.collective_rpc(vllm_weights.load_mode))
        self.load_mode = modes.pop() if len(modes) == 1 else "reload"
        if load_mode is not None:       # "reload" is valid for every model; others must fit
            if load_mode not in ("reload", self.load_mode):
                raise ValueError(f"load_mode={load_mode!r} does not fit this model (it allows "
                                 f"'reload' or {self.load_mode!r})")
            self.load_mode = load_mode
        self._failure: Optional[str] = None
        self._stopped: Set[int] = set()   # stop ids named by stop_generating
        self._shared_steps = SharedSteps()   # the step loop of generates run beside others
        # Bumped by every weight change; `start_fingerprint`'s digest holds while unchanged.
        self._weights_epoch = 0
        self.tp_size = generate_config.infer_tensor_parallel_size
        self.worker_start = worker_start(generate_config)
        # vLLM's own renaming of checkpoint names (None: names are the engine's already).
        self._mapper = self.llm.collective_rpc(vllm_weights.name_mapper)[0]
        self._engine_names: Dict[str, str] = {}
        view = self._view(with_digest=False)
        self.hf_shapes = {name: shape for name, (shape, _, _) in view.items()}
        # HF name -> the vLLM module that loads it: one load_weights call must carry all of a
        # module's tensors.
        self.module_of = {name: owner for name, (_, _, owner) in view.items()}
        self.shared_weights: Optional[SharedWeights] = None
        shared_memory.sweep_stale()       # files of killed engines and ranks: memory
        if share_weights:
            path = shared_memory.shm_path(shared_memory.VLLM_WEIGHTS, os.getpid())
            numel, dtype, places = self.llm.collective_rpc(vllm_weights.share_weights,
                                                           args=(path,))[0]
            shapes = {name: tuple(shape) for name, (_, shape) in places.items()}
            if shapes != {name: tuple(shape) for name, shape in self.hf_shapes.items()}:
                raise RuntimeError(f"shared weight places {sorted(shapes)} disagree with "
                                   f"vLLM's tensors {sorted(self.hf_shapes)}")
            self.shared_weights = SharedWeights(path, numel, dtype, places,
                                                prefix_renames(self._mapper))
        check_inflight(inflight_sync, generate_config,
                       self.llm.llm_engine.model_config.is_multimodal_model)
        self.inflight = (InflightWeights(inflight_sync, self.hf_shapes, self.dtype,
                                         self.shared_weights, gate_timeout_s)
                         if inflight_sync else None)
        self.stages_weights = self.inflight is not None
        # Shared weights change under vLLM with no load call: the version each generate
        # carries (the driver's) says when, and what was computed from the old ones goes
        # then, so the actor's sync needs no call here (`weights_written`) to say it.
        self.resets_lazily = self.shared_weights is not None and self.inflight is None
        self._weights_version: Optional[int] = None
        startup.started()                 # a Ray engine's start ends (workers/worker_setup.py)

    def describe(self) -> dict:
        """What a weight sender needs to know about this engine (picklable)."""
        shared = self.shared_weights
        if shared is not None and self.inflight is not None:
            shared = self.inflight.record          # the actor writes the second buffer
        return {"dtype": self.dtype, "hf_shapes": self.hf_shapes, "module_of": self.module_of,
                "load_mode": self.load_mode, "shared_weights": shared,
                "stages_weights": self.stages_weights, "resets_lazily": self.resets_lazily,
                "pid": os.getpid(), "node": this_node(), "worker_start": self.worker_start}

    # ---------------------------------------------------------------- generation

    def _usable(self) -> None:
        if self._failure is not None:
            raise WeightSyncError(f"this vLLM engine is unusable after a failed weight load "
                                  f"({self._failure}); start a new one")

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], n: int = 1,
                 images: Optional[Sequence[Sequence[bytes]]] = None,
                 mm_processor_kwargs: Optional[dict] = None, with_routes: bool = False,
                 stop_id: Optional[int] = None, weights_version: Optional[int] = None,
                 beside_others: bool = False, **sampling_overrides) -> RolloutOutput:
        """n samples per prompt (prompt-major) with the sampled tokens' log-probs, and with
        `with_routes` each sample's MoE routes (engines/vllm_routes.py: vLLM's own, or captured
        in the generate).

        With a sampling seed, prompt i's samples use seeds seed + i*n ... seed + i*n + n-1, so no
        two samples share a random stream; vary the seed per step (override ``seed=``).
        `max_tokens` / `min_tokens` may be lists, a value per prompt.
        `images[i]`: prompt i's images (encoded bytes, one `<|image_pad|>` each in its ids),
        processed by vLLM with `mm_processor_kwargs` (the trainer's pixel bounds). The output's
        prompt ids are vLLM's own, image pads expanded: what the trainer's must equal.
        With a `stop_id` it can be stopped (`stop_generating`): unfinished samples then answer
        their tokens so far, finish reason None. `weights_version`: the weights the caller
        means (`resets_lazily`: a new one drops what the old ones computed first).
        `beside_others`: this generate may run while others do (called in the engine's turns
        concurrency group: a multi-turn rollout's turns, rollout/interleaved.py); they share
        one step loop (engines/vllm_stoppable.SharedSteps). `seed` may then be a list too.
        """
        self._usable()
        self.build.step_on_this_thread()       # a Ray call's thread may not be vLLM's own
        if weights_version != self._weights_version and weights_version is not None:
            if self.resets_lazily and self._weights_version is not None:
                self._weights_changed()
            self._weights_version = weights_version
        limits = {k: sampling_overrides.pop(k) for k in PER_PROMPT
                  if isinstance(sampling_overrides.get(k), (list, tuple))}
        params = sampling_params(self.config.sampling_config, n, **sampling_overrides)
        prompts = requests(prompt_token_ids, images, mm_processor_kwargs)
        if params.seed is not None or limits:
            params = per_prompt_params(params, len(prompts), n, limits)
        if with_routes:
            if self.inflight is not None:
                raise ValueError("routes are captured in one uninterrupted generate: not "
                                 "with inflight_sync")
            if self.returns_routes:
                results = self.llm.generate(prompts, params, use_tqdm=False)
                routes = vllm_routes.returned_routes(results)
            else:
                results, routes = vllm_routes.generate_with_routes(self.llm, prompts, params)
        elif stop_id is not None or self.inflight is not None or beside_others:
            if not isinstance(params, list):
                params = [params] * len(prompts)
            results = generate_stoppable(self.llm, prompts, params,
                                         lambda: stop_id in self._stopped, self.inflight,
                                         self._shared_steps if beside_others else None)
            self._stopped.discard(stop_id)    # ids are never reused
        else:
            results = self.llm.generate(prompts, params, use_tqdm=False)
        return RolloutOutput.from_results(results, routes if with_routes else None)

    def stop_generating(self, stop_ids: Sequence[int]) -> None:
        """Stop the generates given these stop ids after their current engine step, or at
        their first if they have not started: called beside a running generate (a Ray engine's
        "control" concurrency group, rollout/engine_group.py)."""
        self._stopped.update(stop_ids)

    def score(self, prompt_token_ids: Sequence[Sequence[int]],
              response_token_ids: Sequence[Sequence[int]]) -> List[List[float]]:
        """log p(response token) under vLLM's current weights at temperature 1 (vLLM's prompt
        log-probs): checks what the engine computes without sampling anything."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._usable()
        self.build.step_on_this_thread()
        prompts = [TokensPrompt(prompt_token_ids=list(map(int, p)) + list(map(int, r)))
                   for p, r in zip(prompt_token_ids, response_token_ids)]
        with self.inflight.gate.generating() if self.inflight else contextlib.nullcontext():
            results = self.llm.generate(prompts, SamplingParams(max_tokens=1, prompt_logprobs=0),
                                        use_tqdm=False)
        out = []
        for p, r, result in zip(prompt_token_ids, response_token_ids, results):
            lps = result.prompt_logprobs
            out.append([lps[len(p) + t][int(tok)].logprob for t, tok in enumerate(r)])
        return out

    # ---------------------------------------------------------------- weights

    def engine_name(self, name: str) -> str:
        """The engine's own name of a tensor sent under its HF name (checkpoint layout or a
        loaded transformers model's), by the model's own `hf_to_vllm_mapper`; engine names
        are left as they are."""
        mapped = self._engine_names.get(name)
        if mapped is None:
            mapped = name if self._mapper is None else self._mapper.map_name(name)
            if mapped is None:
                raise WeightSyncError(f"{name}: vLLM's model drops this tensor when loading "
                                      f"(its hf_to_vllm_mapper maps it to nothing)")
            self._engine_names[name] = mapped
        return mapped

    def _renamed(self, items):
        """(name, ...) tuples with the engine's own names."""
        return [(self.engine_name(item[0]), *item[1:]) for item in items]

    def _check_names(self, shapes: Sequence[Tuple[str, Sequence[int]]]) -> None:
        """Reject before vLLM sees them: unknown names, wrong shapes, or a fused vLLM module
        fed only part of its tensors (vLLM would process it half-loaded: NaN weights)."""
        by_module: Dict[str, set] = {}
        for name, shape in shapes:
            if name not in self.hf_shapes:
                raise WeightSyncError(f"{name}: vLLM's model has no such tensor")
            if tuple(shape) != tuple(self.hf_shapes[name]):
                raise WeightSyncError(f"{name}: shape {tuple(shape)} but vLLM expects "
                                      f"{tuple(self.hf_shapes[name])}")
            by_module.setdefault(self.module_of[name], set()).add(name)
        for module, names in by_module.items():
            missing = sorted(n for n, m in self.module_of.items() if m == module and n not in names)
            if missing:
                raise WeightSyncError(f"vLLM module {module} would be loaded without {missing}: "
                                      f"send all of a module's tensors in one load_weights call")

    def _failed(self, exc: Exception, where: str = "") -> WeightSyncError:
        """Mark the engine unusable and say why (any failed load is fatal)."""
        self._failure = f"loading{where}: {type(exc).__name__}: {exc}"
        if isinstance(exc, WeightSyncError):
            return exc
        return WeightSyncError(f"vLLM weight load failed{where}: {type(exc).__name__}: {exc}")

    def load_weights(self, weights: NamedTensors) -> None:
        """Load HF-named tensors in place (one bucket), then reset the prefix cache.

        Any failure leaves vLLM with weights that cannot be trusted: it raises WeightSyncError
        and the engine refuses all further work. At infer TP > 1 the tensors are staged in a
        shared file that every TP worker maps (`load_weights_from_bucket`): a generator or a
        list of tensors cannot cross to vLLM's worker processes.
        """
        self._usable()
        pairs = self._renamed(weights)
        if self.inflight is not None:
            self._check_names([(name, t.shape) for name, t in pairs])
            self.inflight.stage(pairs)
            return
        if self.tp_size > 1:
            self._load_staged(pairs)
            return
        tracker = _NameTracker(pairs)
        try:
            self._check_names([(name, t.shape) for name, t in pairs])
            modules = sorted({self.module_of[name] for name, _ in pairs})
            self.llm.collective_rpc(vllm_weights.LOADERS[self.load_mode],
                                    args=(iter(tracker), modules))
            self._weights_changed()
        except Exception as exc:
            raise self._failed(exc, f" at {tracker.last!r}" if tracker.last else "") from exc

    def _load_staged(self, pairs: List[Tuple[str, torch.Tensor]]) -> None:
        dtype = self.dtype
        entries, offset = [], 0
        for name, t in pairs:
            entries.append((name, offset, tuple(t.shape)))
            offset += t.numel()
        region = shared_memory.SharedRegion(
            shared_memory.shm_path(shared_memory.VLLM_STAGING, os.getpid()), max(offset, 1),
            dtype, create=True)
        try:
            for (name, start, shape), (_, t) in zip(entries, pairs):
                region.tensor[start:start + t.numel()].view(shape).copy_(t)
            self.load_weights_from_bucket(region.path, region.numel, dtype, entries)
        finally:
            self.release_bucket(region.path)
            region.close()

    def weights_written(self) -> None:
        """The actor has written new weights into `shared_weights`: drop what was computed
        from the old ones (`_weights_changed`). With inflight_sync, the end of every sync:
        the staged version goes in between two decode steps (`_commit`)."""
        self._usable()
        if self.inflight is None:
            self._weights_changed()
        else:
            self.inflight.run(self._commit)

    def _commit(self) -> None:
        self.inflight.commit(self._load_bucket)
        self._weights_changed()

    def _weights_changed(self) -> None:
        """Drop everything vLLM computed from the old weights, after every load: the prefix
        cache (KV of seen prompts) and the multimodal encoder cache (image features, keyed by
        the image's hash only: vLLM issue 44910). The engine core's reset clears both the
        scheduler's record and the workers' features; resetting only the workers' would leave
        the scheduler believing a seen image is cached ("Encoder cache miss", a stuck
        request). `LLM` has no encoder-cache reset of its own in vLLM 0.32: its engine has."""
        self._weights_epoch += 1
        if self.inflight is None:
            self.llm.reset_prefix_cache()
            self.llm.llm_engine.reset_encoder_cache()
        elif self.inflight.mode == "recompute_kv":    # running requests prefilled again
            self.llm.reset_prefix_cache(reset_running_requests=True)   # (no images: refused)

    def invalidate(self, reason: str) -> None:
        """Someone else left vLLM's weights half-written: refuse all further work."""
        self._failure = reason
        self._weights_epoch += 1

    def can_open_device_buffers(self, device_uuid: str) -> bool:
        """vLLM's workers open device buckets in place where the device shares buffers
        between processes and this process sees the bucket's device (its workers are started
        with the same visible devices)."""
        return device.shares_device_buffers() and device_ipc.sees(device_uuid)

    def load_weights_from_bucket(self, path, numel: int, dtype: torch.dtype,
                                 entries: Sequence[Tuple[str, int, Tuple[int, ...]]]) -> None:
        """`load_weights` of tensors laid out in a shared bucket (the resharder's: a file in
        /dev/shm, or a device buffer): (HF name, element offset, shape) per tensor. Every TP
        worker opens the bucket itself (`vllm_weights.load_from_bucket`); the last two stay
        open until `release_bucket`, so buckets reusing them cost no new mapping."""
        self._usable()
        if self.inflight is None:
            self._load_bucket(path, numel, dtype, entries)
            self._weights_changed()
            return
        entries = self._renamed(entries)
        self._check_names([(name, shape) for name, _, shape in entries])
        self.inflight.stage_bucket(path, numel, dtype, entries)

    def _load_bucket(self, path, numel: int, dtype: torch.dtype, entries) -> None:
        entries = self._renamed(entries)
        try:
            self._check_names([(name, shape) for name, _, shape in entries])
            modules = sorted({self.module_of[name] for name, _, _ in entries})
            self.llm.collective_rpc(vllm_weights.load_from_bucket,
                                    args=(path, numel, dtype, list(entries), self.load_mode,
                                          modules))
        except Exception as exc:
            raise self._failed(exc) from exc

    def submit_load_from_bucket(self, path, numel: int, dtype: torch.dtype,
                                entries) -> Callable[[], None]:
        """`load_weights_from_bucket`, done before it returns (this engine loads in the caller's
        thread); the returned function has nothing left to wait for."""
        self.load_weights_from_bucket(path, numel, dtype, entries)
        return _loaded

    def release_bucket(self, path: Optional[str] = None) -> None:
        """Unmap one shared file, or all of them (None), in every TP worker (with
        inflight_sync the engine maps each bucket only while it copies it)."""
        if self.inflight is None:
            self.llm.collective_rpc(vllm_weights.release_buckets, args=(path,))

    def _view(self, with_digest: bool):
        """`vllm_fingerprint.vllm_view` of every TP worker, combined (between two decode
        steps with inflight_sync)."""

        def view():
            return combine_views(self.llm.collective_rpc(_vllm_view, args=(with_digest,)))
        return view() if self.inflight is None else self.inflight.run(view)

    # ---------------------------------------------------------------- memory

    def sleep(self) -> bool:
        """Hand vLLM's device memory back between rollouts (`generate_config.sleep_level`);
        False where nothing sleeps (level 0, or a platform without sleep mode)."""
        if self.config.sleep_level == 0 or not device.engines_can_sleep():
            return False
        self._weights_epoch += 1          # level 2 drops the weights
        self.llm.sleep(level=self.config.sleep_level)
        return True

    def wake_up(self, tags: Optional[Sequence[str]] = None) -> None:
        """Take memory back: ["weights"] before a sync, ["kv_cache"] before generating (vLLM
        tags); None: everything. A no-op where `sleep` did nothing."""
        if self.config.sleep_level and device.engines_can_sleep():
            self._weights_epoch += 1
            self.llm.wake_up(list(tags) if tags is not None else None)

    def close(self, process_ends: bool = False) -> None:
        """Remove the shared weights' file and stop vLLM's workers (at infer TP > 1,
        processes that hold shared memory). `process_ends`: the caller ends this process next
        (a Ray engine at the end of a run), so a vLLM that runs in it alone is left to the
        exit: its teardown collects the whole heap, about 1 CPU-s for nothing."""
        if self.shared_weights is not None and self.llm is not None:
            self.llm.collective_rpc(vllm_weights.unshare_weights)
            self.shared_weights = None
        if self.inflight is not None:
            self.inflight.close()
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            if not (process_ends and self.worker_start == "in-process"):
                core.shutdown()
            else:       # nor at exit: vLLM's client runs the same teardown from a finalizer
                finalizer = getattr(core, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
            self.build.release_segments(self._segments)
        self.llm = None


def _loaded() -> None:
    """Nothing to wait for: the load ended before `submit_load_from_bucket` returned."""
