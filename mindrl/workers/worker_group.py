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

from mindrl.workers.megatron_worker import MegatronWorker, RoleSetup

WORKER_ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


class WorkerDied(RuntimeError):
    """A rank of a role is gone; the run cannot continue."""


class WorkerGroup:
    def __init__(self, role: str, world_size: int, placement_group: PlacementGroup,
                 first_bundle: int, resources_per_rank: dict):
        self.role, self.world_size = role, world_size
        env = dict(WORKER_ENV)
        for key in ("MINDRL_DEVICE", "MINDRL_WORK_DIR", "MINDRL_CACHE_DIR"):
            if key in os.environ:
                env[key] = os.environ[key]
        remote_cls = ray.remote(MegatronWorker)
        self.workers = [
            remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group, placement_group_bundle_index=first_bundle + rank),
                runtime_env={"env_vars": env}, max_concurrency=1, **resources_per_rank,
            ).remote(role, rank, world_size)
            for rank in range(world_size)]

    def _get(self, refs: List[Any], what: str, timeout: Optional[float] = None) -> List[Any]:
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.RayActorError as e:
            rank = self._failed_rank(refs)
            raise WorkerDied(f"role {self.role!r} rank {rank} died during {what}: "
                             f"{str(e).splitlines()[0]}") from None
        except ray.exceptions.RayTaskError as e:
            rank = self._failed_rank(refs)
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

    def call(self, method: str, *args, **kwargs) -> List[Any]:
        refs = [getattr(w, method).remote(*args, **kwargs) for w in self.workers]
        return self._get(refs, method)

    def call_rank0(self, method: str, *args, **kwargs) -> Any:
        """Collective methods: every rank runs it, rank 0's answer is returned."""
        return self.call(method, *args, **kwargs)[0]

    def setup(self, setup: RoleSetup) -> None:
        addr, port = self._get([self.workers[0].master_address.remote()], "master_address")[0]
        self.call("setup", setup, addr, port)

    def shutdown(self) -> None:
        try:
            self._get([w.shutdown.remote() for w in self.workers], "shutdown", timeout=60)
        except Exception:
            pass
        for w in self.workers:
            ray.kill(w)
