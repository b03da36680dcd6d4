"""The rollout engines: a data-parallel group of vLLM engines, on the actor's devices or on
devices of their own (generate_config.rollout_devices, config/placement.py).

Those devices host `devices / (infer TP x infer PP)` engines, each a Ray actor running one
`VLLMEngine` placed on the first device of its span.
A step's Batch is split by prompt group into one contiguous run per engine (a prompt's n
samples stay on one engine), every engine generates at once, and the parts merge back in
prompt order with the rollout fields added (response_ids, response_mask, rollout_log_probs,
finish_reason, and the policy version the engines held). `submit` starts a generate and
returns a handle; `generate` is submit and wait. Sampling seeds follow the prompt, not the
engine: prompt i's samples use seed + i*n ... whatever the engine count, so a run's samples do
not depend on how many engines drew them.

A dead engine stops the driver with `EngineDied` naming it; a failed call names it too, and
an engine that does not answer a generate within rl_config.phase_timeout_s raises
PhaseTimeout naming it (workers/deadline.py).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch

from mindrl.data.batch import Batch, right_pad
from mindrl.errors import EngineDied, PhaseTimeout
from mindrl.platforms import preload
from mindrl.rollout.merge import rollout_prompts, with_rollout
from mindrl.workers.deadline import answers, bundle_nodes, member
from mindrl.workers.placement import EngineSlot

CONTROL = "control"   # the engines' concurrency group for calls that must not wait
SYNC = "sync"         # a weight sync's calls beside a generate (rl_config.inflight_sync)
TURNS = "turns"       # a multi-turn rollout's calls, run beside each other (rollout/interleaved)
TURN_CALLS = 64       # how many one engine runs at once (one step loop for all)


@dataclass(eq=False)
class RolloutHandle:
    """One submitted generate: the engines' Ray object refs (by engine index), the batch's
    parts they answer, and the policy version the engines held when it was submitted (the
    version it generates with: a weight sync refuses to start while a handle is in flight,
    `RolloutGroup.in_flight`). `finished` is when the last engine answered (perf_counter,
    recorded as the answers arrive; None until then)."""

    group: "RolloutGroup"
    parts: List[Batch]
    refs: Dict[Any, int]
    n: int
    policy_version: int
    submitted: float
    _batch: Optional[Batch] = None
    finished: Optional[float] = None
    _answered: List[float] = field(default_factory=list)

    def _watch(self) -> None:
        """Record each engine's answer time as it arrives (a callback in Ray's thread)."""
        if not self.refs:
            self.finished = self.submitted
        for ref in self.refs:
            ref.future().add_done_callback(self._answer)

    def _answer(self, _future) -> None:
        self._answered.append(time.perf_counter())
        if len(self._answered) == len(self.refs):
            self.finished = max(self._answered)

    def busy(self) -> bool:
        """Whether a weight sync now could change the weights under this generate: until
        waited for (a partial rollout's handle, rollout/partial_handle.py: while a chunk may
        run)."""
        return self._batch is None

    def done(self) -> bool:
        """Whether every engine has answered (waits for nothing)."""
        import ray

        if self._batch is not None or not self.refs:
            return True
        ready, _ = ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        return len(ready) == len(self.refs)

    def wait(self) -> Batch:
        """The batch plus its responses and `policy_version` (one per sample), in prompt
        order; a dead, failing or late engine raises as `generate` does. Waiting again gives
        the same batch."""
        if self._batch is None:
            group = self.group
            outputs = group._wait(self.refs, "generate", group.phase_timeout_s, self.submitted)
            answered = []
            for i in sorted(outputs):
                part = with_rollout(self.parts[i], outputs[i], self.n)
                commits = getattr(outputs[i], "token_commits", None)   # an in-flight sync's
                answered.append(part if commits is None else group.token_versions(part, commits))
            self._batch = self._merged(answered)
        return self._batch

    def _merged(self, answered: List[Batch]) -> Batch:
        """The engines' answered parts, in engine order, as one batch with its policy_version."""
        merged = Batch.concat(answered)
        return merged.add(policy_version=torch.full((len(merged),), self.policy_version,
                                                    dtype=torch.long))

    result = wait


class RolloutGroup:
    """N vLLM engines as Ray actors; `generate` splits, runs all at once and merges."""

    def __init__(self, model_path: str, generate_config, seed: int, slots: Sequence[EngineSlot],
                 env: Dict[str, str], engine_kwargs: Optional[dict] = None,
                 phase_timeout_s: Optional[float] = None):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from mindrl.engines.vllm_engine import VLLMEngine

        self.config, self.slots = generate_config, list(slots)
        # `stop_generating` runs beside a generate, and with inflight_sync a weight sync's
        # calls (the engine's StepGate lets them at vLLM between decode steps), and a
        # multi-turn rollout's turns beside each other (TURNS); every other call, one at a
        # time (a weight sync waits until no turn is on the engines: RolloutGroup.in_flight).
        remote_cls = ray.remote(concurrency_groups={CONTROL: 1, SYNC: 1, TURNS: TURN_CALLS})(
            VLLMEngine)
        self.engines = [
            remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    slot.placement_group, placement_group_bundle_index=slot.bundle),
                runtime_env=preload.runtime_env("vllm", env), max_concurrency=1, max_restarts=0,
                **slot.resources,
            ).remote(str(model_path), generate_config, seed, **(engine_kwargs or {}))
            for slot in self.slots]
        self.busy_seconds: List[float] = [0.0] * len(self.engines)   # of the last generate
        self.nodes: List[str] = []        # each engine's node, known once started
        self.asleep = False               # engines hold no device memory until woken
        self.pids: List[Optional[int]] = [None] * len(self.engines)
        self.phase_timeout_s = phase_timeout_s
        # The actor's weights version the engines hold (the number of updates behind them),
        # set by each weight sync (trainer/assemble.RunParts.sync_weights); every sample
        # generated carries it as `policy_version`.
        self.policy_version = 0
        # With inflight_sync the engines take syncs in while generating: the version each
        # engine held after its k-th sync is commit_versions[k] (every sync reaches every
        # engine once), what each token's count of syncs maps to.
        self.stages_weights = bool((engine_kwargs or {}).get("inflight_sync"))
        self.commit_versions: List[int] = [self.policy_version]
        self._pending: List[RolloutHandle] = []   # submitted, not yet waited for
        self._stop_ids = itertools.count(1)       # for generates a sync may stop

    def synced(self, version: int) -> None:
        """A weight sync reached every engine: they now hold the actor's `version`."""
        self.policy_version = version
        self.commit_versions.append(version)

    def token_versions(self, part: Batch, commits: List[List[int]]) -> Batch:
        """With inflight_sync, `token_policy_version` of an engine's answer: each token's
        count of syncs taken in (RolloutOutput.token_commits), as the version it stood for."""
        versions, _ = right_pad([[self.commit_versions[c] for c in row] for row in commits], 0,
                                part["response_ids"].shape[1])
        return part.add(token_policy_version=versions)

    def next_stop_id(self) -> int:
        """A new id for a stoppable generate (VLLMEngine.generate's `stop_id`)."""
        return next(self._stop_ids)

    def stop_generating(self, stop_ids: Sequence[int]) -> None:
        """Ask every engine to stop the generates given these ids after their current step
        (answered at once, beside the generate: the engines' control concurrency group)."""
        for engine in self.engines:
            engine.stop_generating.options(concurrency_group=CONTROL).remote(list(stop_ids))

    @property
    def in_flight(self) -> int:
        """Submitted generates not yet waited for: a weight sync now could change the weights
        under them (their samples would carry a wrong policy_version)."""
        self._pending = [h for h in self._pending if h._batch is None]
        return sum(h.busy() for h in self._pending)

    def __len__(self) -> int:
        return len(self.engines)

    def _name(self, index: int) -> str:
        devices = self.slots[index].devices
        span = (f"device {devices[0]}" if len(devices) == 1
                else f"devices {devices[0]}-{devices[-1]}")
        owner = "actor " if self.slots[index].on_actor_devices else ""
        return f"rollout engine {index} ({owner}{span})"

    def members(self) -> List[dict]:
        """Each engine's label, pid and Ray node (workers/deadline.py)."""
        nodes = self.nodes or [n for slot in self.slots
                               for n in bundle_nodes(slot.placement_group, [slot.bundle])]
        return [member(self._name(i), self.pids[i], nodes[i]) for i in range(len(self.slots))]

    def _wait(self, refs: Dict[Any, int], what: str, timeout_s: Optional[float] = None,
              since: Optional[float] = None) -> Dict[int, Any]:
        """Results by engine index as they finish; the first failure raises at once.
        `busy_seconds` of each engine counts from `since` (default: now)."""
        import ray

        results, start = {}, time.perf_counter() if since is None else since
        for ref in answers({r: self._name(i) for r, i in refs.items()}, what, timeout_s):
            index = refs[ref]
            try:
                results[index] = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                raise EngineDied(f"{self._name(index)} died during {what}: "
                                 f"{str(e).splitlines()[0]}", what, [self._name(index)]) from None
            except ray.exceptions.RayTaskError as e:
                raise RuntimeError(f"{self._name(index)} failed in {what}:\n{e}") from None
            self.busy_seconds[index] = time.perf_counter() - start
        return results

    def start(self, timeout_s: float = 600.0) -> List[int]:
        """Wait for every engine to be up; their pids, in engine order."""
        try:
            found = self._wait({e.describe.remote(): i for i, e in enumerate(self.engines)},
                               "start", timeout_s)
        except PhaseTimeout as e:
            raise TimeoutError(f"{', '.join(e.who)}: not started within {timeout_s:.0f} s (an "
                               f"engine Ray cannot place waits for resources: see `ray "
                               f"status`)") from None
        self.nodes = [found[i]["node"] for i in range(len(self.engines))]   # Ray node ids
        self.pids = [found[i]["pid"] for i in range(len(self.engines))]
        return list(self.pids)

    def submit(self, batch: Batch, mm_processor_kwargs: Optional[dict] = None,
               **sampling_overrides) -> "RolloutHandle":
        """Start generating `batch` on every engine and return at once: the handle's `wait()`
        gives what `generate` gives. Submissions queue on each engine in order, so several can
        be in flight, each answered with its own prompts. The batch splits by prompt group, one
        contiguous run per engine (see the module docstring for seeds); a batch with images
        (data/vl_prompts.py: fields `rollout_prompt_ids`, `images`) sends each group's
        one-pad-per-image ids and images, processed with `mm_processor_kwargs`. (In chunks
        that a weight sync can pause between: rollout/partial_handle.submit_in_chunks.)"""
        base = sampling_overrides.pop("seed", self.config.sampling_config.seed)
        n = batch.samples_per_group()
        parts = batch.split_groups(len(self.engines))
        refs, first_group = {}, 0
        self.busy_seconds = [0.0] * len(self.engines)
        submitted = time.perf_counter()
        for index, part in enumerate(parts):
            prompts, images = rollout_prompts(part)
            if prompts:
                seed = {} if base is None else {"seed": base + first_group * n}
                vision = ({} if images is None else
                          {"images": images, "mm_processor_kwargs": mm_processor_kwargs})
                refs[self.engines[index].generate.remote(
                    prompts, n, **seed, **vision, weights_version=self.policy_version,
                    **sampling_overrides)] = index
            first_group += len(prompts)
        handle = RolloutHandle(self, parts, refs, n, self.policy_version, submitted)
        handle._watch()
        self._pending.append(handle)
        return handle

    def generate(self, batch: Batch, mm_processor_kwargs: Optional[dict] = None,
                 **sampling_overrides) -> Batch:
        """The batch plus its responses (docs/design.md#the-batch-contract) and the policy
        version that generated them, every engine at once, in prompt order: `submit` and wait.
        `busy_seconds` then holds each engine's time to its answer; the merge checks vLLM's
        expansion of image pads."""
        return self.submit(batch, mm_processor_kwargs, **sampling_overrides).wait()

    def sleep(self) -> bool:
        """Every engine hands its device memory back to the actor's passes
        (`generate_config.sleep_level`); whether any did (never on CPU)."""
        slept = self._wait({e.sleep.remote(): i for i, e in enumerate(self.engines)}, "sleep",
                           self.phase_timeout_s)
        self.asleep = any(slept.values())
        return self.asleep

    def wake(self, tags: Optional[Sequence[str]] = None) -> None:
        """Take memory back: ["weights"] before a sync, ["kv_cache"] before generating."""
        if not self.asleep:
            return
        self._wait({e.wake_up.remote(tags): i for i, e in enumerate(self.engines)},
                   f"wake_up {tags or 'all'}", self.phase_timeout_s)
        if tags is None or "kv_cache" in tags:
            self.asleep = False

    def shutdown(self, timeout_s: float = 30.0, graceful: bool = True) -> None:
        """Let every engine stop its workers, then end the actors; after a failure
        (graceful=False) end them at once: a stuck engine would never answer."""
        import ray

        if graceful:
            try:
                ray.wait([e.close.remote(process_ends=True) for e in self.engines],
                         num_returns=len(self.engines), timeout=timeout_s)
            except Exception:
                pass
        for engine in self.engines:
            try:
                ray.kill(engine)
            except Exception:
                pass
        self.engines = []
