"""The rollout engines: a data-parallel group of vLLM engines on the actor's devices.

The actor's devices host `devices / (infer TP x infer PP)` engines (DESIGN.md, the cluster
picture), each a Ray actor running one `VLLMEngine` placed on the first device of its span.
A step's prompts are split into one contiguous run per engine (a prompt's n samples stay on
one engine), every engine generates at once, and the results come back in prompt order with
the same per-sample fields as one engine gives. Sampling seeds follow the prompt, not the
engine: prompt i's samples use seed + i*n ... whatever the engine count, so a run's samples do
not depend on how many engines drew them.

A dead engine stops the driver with `EngineDied` naming it; a failed call names it too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mindrl.engines.vllm_engine import RolloutOutput
from mindrl.errors import EngineDied


@dataclass(frozen=True)
class EngineSlot:
    """Where one engine runs: a placement-group bundle (the first device of its span), the
    Ray resources it takes there, and the actor devices it spans (for messages)."""

    placement_group: Any
    bundle: int
    resources: dict
    devices: Tuple[int, ...]


def split_prompts(count: int, engines: int) -> List[Tuple[int, int]]:
    """[start, stop) prompt ranges, one per engine, sizes differing by at most one (the first
    engines take the extra prompts); an engine with nothing to do gets an empty range."""
    base, extra = divmod(count, engines)
    ranges, start = [], 0
    for e in range(engines):
        stop = start + base + (1 if e < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def merge_rollouts(parts: Sequence[Tuple[int, RolloutOutput]]) -> RolloutOutput:
    """One RolloutOutput from (first prompt index, engine output) parts in prompt order: each
    part's prompt_index is shifted by its first prompt index."""
    out = RolloutOutput([], [], [], [], [])
    for start, part in sorted(parts, key=lambda p: p[0]):
        out.prompt_token_ids += part.prompt_token_ids
        out.response_token_ids += part.response_token_ids
        out.log_probs += part.log_probs
        out.finish_reasons += part.finish_reasons
        out.prompt_index += [start + i for i in part.prompt_index]
    return out


class RolloutGroup:
    """N vLLM engines as Ray actors; `generate` splits, runs all at once and merges."""

    def __init__(self, model_path: str, generate_config, seed: int, slots: Sequence[EngineSlot],
                 env: Dict[str, str], engine_kwargs: Optional[dict] = None):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from mindrl.engines.vllm_engine import VLLMEngine

        self.config, self.slots = generate_config, list(slots)
        remote_cls = ray.remote(VLLMEngine)
        self.engines = [
            remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    slot.placement_group, placement_group_bundle_index=slot.bundle),
                runtime_env={"env_vars": env}, max_concurrency=1, max_restarts=0,
                **slot.resources,
            ).remote(str(model_path), generate_config, seed, **(engine_kwargs or {}))
            for slot in self.slots]
        self.busy_seconds: List[float] = [0.0] * len(self.engines)   # of the last generate

    def __len__(self) -> int:
        return len(self.engines)

    def _name(self, index: int) -> str:
        devices = self.slots[index].devices
        span = (f"device {devices[0]}" if len(devices) == 1
                else f"devices {devices[0]}-{devices[-1]}")
        return f"rollout engine {index} (actor {span})"

    def _wait(self, refs: Dict[Any, int], what: str,
              timeout_s: Optional[float] = None) -> Dict[int, Any]:
        """Results by engine index as they finish; the first failure raises at once."""
        import ray

        results, pending, start = {}, list(refs), time.perf_counter()
        while pending:
            left = None if timeout_s is None else timeout_s - (time.perf_counter() - start)
            ready, pending = ray.wait(pending, num_returns=1,
                                      timeout=None if left is None else max(left, 0))
            if not ready:
                late = ", ".join(self._name(refs[r]) for r in pending)
                raise TimeoutError(f"{late}: no answer to {what} within {timeout_s:.0f} s (an "
                                   f"engine Ray cannot place waits for resources: see `ray "
                                   f"status`)")
            index = refs[ready[0]]
            try:
                results[index] = ray.get(ready[0])
            except ray.exceptions.RayActorError as e:
                raise EngineDied(f"{self._name(index)} died during {what}: "
                                 f"{str(e).splitlines()[0]}") from None
            except ray.exceptions.RayTaskError as e:
                raise RuntimeError(f"{self._name(index)} failed in {what}:\n{e}") from None
            self.busy_seconds[index] = time.perf_counter() - start
        return results

    def start(self, timeout_s: float = 600.0) -> List[int]:
        """Wait for every engine to be up; their pids, in engine order."""
        found = self._wait({e.describe.remote(): i for i, e in enumerate(self.engines)}, "start",
                           timeout_s)
        return [found[i]["pid"] for i in range(len(self.engines))]

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], n: int,
                 **sampling_overrides) -> RolloutOutput:
        """n samples per prompt from every engine at once, in prompt order (see the module
        docstring for seeds); `busy_seconds` then holds each engine's time to its answer."""
        base = sampling_overrides.pop("seed", self.config.sampling_config.seed)
        ranges = split_prompts(len(prompt_token_ids), len(self.engines))
        refs = {}
        self.busy_seconds = [0.0] * len(self.engines)
        for index, (start, stop) in enumerate(ranges):
            if start == stop:
                continue
            seed = {} if base is None else {"seed": base + start * n}
            ref = self.engines[index].generate.remote(
                [list(p) for p in prompt_token_ids[start:stop]], n, **seed,
                **sampling_overrides)
            refs[ref] = index
        parts = self._wait(refs, "generate")
        return merge_rollouts([(ranges[i][0], part) for i, part in parts.items()])

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Let every engine stop its workers, then end the actors."""
        import ray

        try:
            ray.wait([e.close.remote() for e in self.engines], num_returns=len(self.engines),
                     timeout=timeout_s)
        except Exception:
            pass
        for engine in self.engines:
            try:
                ray.kill(engine)
            except Exception:
                pass
        self.engines = []
