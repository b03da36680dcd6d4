"""A role as a group of Ray actors, one per rank, placed on a placement group's bundles.

Calls fan out to every rank and are gathered with a deadline; a dead rank surfaces as a
WorkerDied naming the role and rank instead of a hang or a bare Ray traceback.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from mindrl.errors import WorkerDied
from mindrl.workers.megatron_worker import MegatronWorker, RoleSetup

WORKER_ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
              "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore"}


def worker_env() -> dict:
    """Environment of every Ray actor the run starts (ranks and rollout engines)."""
    env = dict(WORKER_ENV)
    for key in ("MINDRL_DEVICE", "MINDRL_WORK_DIR", "MINDRL_CACHE_DIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


class WorkerGroup:
    def __init__(self, role: str, world_size: int, placement_group: PlacementGroup,
                 first_bundle: int, resources_per_rank: dict):
        self.role, self.world_size = role, world_size
        env = worker_env()
        remote_cls = ray.remote(MegatronWorker)
        self.workers = [
            remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group, placement_group_bundle_index=first_bundle + rank),
                runtime_env={"env_vars": env}, max_concurrency=1, **resources_per_rank,
            ).remote(role, rank, world_size)
            for rank in range(world_size)]

    def _get(self, refs: List[Any], what: str, timeout: Optional[float] = None) -> List[Any]:
        """All results; the first failure raises at once (its peers may be stuck in a
        collective waiting for the dead rank, so waiting for all would hang)."""
        try:
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
                if not ready:
                    raise TimeoutError(f"role {self.role!r}: {what} took longer than {timeout} s")
                ray.get(ready)
            return ray.get(refs)
        except ray.exceptions.RayActorError as e:
            rank = self._failed_rank(refs)
            raise WorkerDied(f"role {self.role!r} rank {rank} died during {what}: "
                             f"{str(e).splitlines()[0]}") from None
        except ray.exceptions.RayTaskError as e:
            rank = self._failed_rank(refs)
            if isinstance(getattr(e, "cause", None), WorkerDied):   # e.g. an engine it fed
                raise WorkerDied(f"{e.cause} (seen by role {self.role!r} rank {rank} during "
                                 f"{what})") from None
            raise RuntimeError(f"role {self.role!r} rank {rank} failed in {what}:\n{e}") from None

    def _failed_rank(self, refs) -> str:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for rank, ref in enumerate(refs):
            if ref in ready:
                try:
                    ray.get(ref, timeout=0)
                except Exception:
                    return str(rank)
        return "?"

    def submit(self, method: str, *args, **kwargs) -> List[Any]:
        """Start a method on every rank without waiting; `wait(refs, method)` collects."""
        return [getattr(w, method).remote(*args, **kwargs) for w in self.workers]

    def call(self, method: str, *args, **kwargs) -> List[Any]:
        return self._get(self.submit(method, *args, **kwargs), method)

    def call_rank0(self, method: str, *args, **kwargs) -> Any:
        """Collective methods: every rank runs it, rank 0's answer is returned."""
        return self.call(method, *args, **kwargs)[0]

    def start_setup(self, setup: RoleSetup) -> List[Any]:
        """Begin building every rank's engine (returns at once, so roles set up in parallel);
        `wait(refs, "setup")` gives each rank's pid."""
        addr, port = self._get([self.workers[0].master_address.remote()], "master_address")[0]
        return [w.setup.remote(setup, addr, port) for w in self.workers]

    def wait(self, refs: List[Any], what: str) -> List[Any]:
        return self._get(refs, what)

    def shutdown(self) -> None:
        try:
            self._get([w.shutdown.remote() for w in self.workers], "shutdown", timeout=60)
        except Exception:
            pass
        for w in self.workers:
            ray.kill(w)
