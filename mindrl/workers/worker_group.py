"""A role as a group of Ray actors, one per rank, placed on a placement group's bundles.

Calls fan out to every rank and are gathered under the phase deadline
(rl_config.phase_timeout_s; workers/deadline.py): a dead rank surfaces as a WorkerDied, a rank
that does not answer in time as a PhaseTimeout, each naming the role and rank instead of a hang
or a bare Ray traceback. Setup waits without the deadline (it is not a phase of the step).
"""

from __future__ import annotations

import os
from typing import Any, List, Optional

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from mindrl.errors import WorkerDied
from mindrl.workers.deadline import answers, bundle_nodes, member
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
                 first_bundle: int, resources_per_rank: dict,
                 phase_timeout_s: Optional[float] = None):
        self.role, self.world_size = role, world_size
        self.phase_timeout_s = phase_timeout_s
        self.placement_group, self.first_bundle = placement_group, first_bundle
        self.pids: List[Optional[int]] = [None] * world_size   # known once set up
        env = worker_env()
        remote_cls = ray.remote(MegatronWorker)
        self.workers = [
            remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group, placement_group_bundle_index=first_bundle + rank),
                runtime_env={"env_vars": env}, max_concurrency=1, **resources_per_rank,
            ).remote(role, rank, world_size)
            for rank in range(world_size)]

    def who(self, rank: int) -> str:
        return f"{self.role} rank {rank}"

    def members(self) -> List[dict]:
        """Each rank's label, pid and Ray node (workers/deadline.py)."""
        nodes = bundle_nodes(self.placement_group,
                             [self.first_bundle + r for r in range(self.world_size)])
        return [member(self.who(r), self.pids[r], nodes[r]) for r in range(self.world_size)]

    def _get(self, refs: List[Any], what: str, timeout: Optional[float] = None) -> List[Any]:
        """All results (refs[i] is rank i's); the first failure raises at once (its peers may
        be stuck in a collective waiting for the dead rank, so waiting for all would hang)."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        for ref in answers({ref: self.who(r) for ref, r in rank_of.items()}, what, timeout):
            rank = rank_of[ref]
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                raise WorkerDied(f"role {self.role!r} rank {rank} died during {what}: "
                                 f"{str(e).splitlines()[0]}", what, [self.who(rank)]) from None
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, WorkerDied):   # e.g. an engine it fed
                    raise WorkerDied(f"{cause} (seen by role {self.role!r} rank {rank} during "
                                     f"{what})", cause.what or what, cause.who) from None
                self._raise_if_a_peer_died(rank_of, ref, what)
                raise RuntimeError(f"role {self.role!r} rank {rank} failed in {what}:\n{e}") \
                    from None
        return ray.get(refs)

    def _raise_if_a_peer_died(self, rank_of: dict, failed: Any, what: str,
                              grace_s: float = 5.0) -> None:
        """A rank whose collective lost its peer fails too, often first: the death is the
        cause to report, so the other ranks get a few seconds to show theirs."""
        others = [ref for ref in rank_of if ref is not failed]
        ready, _ = ray.wait(others, num_returns=len(others), timeout=grace_s) if others \
            else ([], [])
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayActorError as e:
                rank = rank_of[ref]
                raise WorkerDied(f"role {self.role!r} rank {rank} died during {what}: "
                                 f"{str(e).splitlines()[0]}", what, [self.who(rank)]) from None
            except Exception:
                continue

    def submit(self, method: str, *args, **kwargs) -> List[Any]:
        """Start a method on every rank without waiting; `wait(refs, method)` collects."""
        return [getattr(w, method).remote(*args, **kwargs) for w in self.workers]

    def call(self, method: str, *args, **kwargs) -> List[Any]:
        return self._get(self.submit(method, *args, **kwargs), method, self.phase_timeout_s)

    def call_rank0(self, method: str, *args, **kwargs) -> Any:
        """Collective methods: every rank runs it, rank 0's answer is returned."""
        return self.call(method, *args, **kwargs)[0]

    def start_setup(self, setup: RoleSetup) -> List[Any]:
        """Begin building every rank's engine (returns at once, so roles set up in parallel);
        `wait_setup(refs)` gives each rank's pid."""
        addr, port = self._get([self.workers[0].master_address.remote()], "master_address")[0]
        return [w.setup.remote(setup, addr, port) for w in self.workers]

    def wait_setup(self, refs: List[Any]) -> List[int]:
        """Each rank's pid once its engine is built (no deadline: not a phase of the step)."""
        self.pids = self._get(refs, "setup")
        return self.pids

    def wait(self, refs: List[Any], what: str) -> List[Any]:
        return self._get(refs, what, self.phase_timeout_s)

    def shutdown(self, graceful: bool = True) -> None:
        """Let every rank let go of its state, then end the actors; after a failure
        (graceful=False) end them at once: a stuck rank would never answer."""
        if graceful:
            try:
                self._get([w.shutdown.remote() for w in self.workers], "shutdown", timeout=60)
            except Exception:
                pass
        for w in self.workers:
            try:
                ray.kill(w)
            except Exception:
                pass
