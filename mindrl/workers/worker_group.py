"""A role as a group of Ray actors, one per rank, placed on a placement group's bundles.

The trainer talks to a role through a typed handle (`RoleGroup`, `ActorGroup`,
`RewardModelGroup`): one method per worker verb, each naming the `MegatronWorker` method it
runs, so a reader (or a tool) can follow a call from the driver to the rank. Calls fan out to
every rank and are gathered under the phase deadline (rl_config.phase_timeout_s;
workers/deadline.py): a dead rank surfaces as a WorkerDied, a rank that does not answer in
time as a PhaseTimeout, each naming the role and rank instead of a hang or a bare Ray
traceback (errors.ray_result). Setup waits without the deadline (it is not a phase of the
step).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from mindrl.config.roles import RoleSetup
from mindrl.data.batch import Batch
from mindrl.errors import WorkerDied, ray_result
from mindrl.platforms import preload
from mindrl.workers.deadline import answers, bundle_nodes, member
from mindrl.workers.megatron_worker import MegatronWorker

Verb = Callable[..., Any]   # a MegatronWorker method, e.g. MegatronWorker.update

WORKER_ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
              "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore"}
# What a run's driver sets (unless set already) before it starts a private local Ray node
# (trainer/launch.py), which that node's processes inherit: no usage reports, no auth token on
# a single-user node, and no idle workers prestarted for the driver (every actor of a run has a
# runtime_env of its own, so Ray never reuses them, and on a small CPU box their start
# competes with the actors' own).
LOCAL_NODE_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                  "RAY_prestart_worker_first_driver": "0"}


def worker_env() -> dict:
    """Environment of every Ray actor the run starts (ranks and rollout engines)."""
    env = dict(WORKER_ENV)
    for key in ("MINDRL_DEVICE", "MINDRL_WORK_DIR", "MINDRL_CACHE_DIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


class RoleGroup:
    """A role's ranks; the verbs every role answers (reference, teacher: log-probs only)."""

    model: Optional[str] = None     # which model of the ranks answers (None: their own)

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
                runtime_env=preload.runtime_env("megatron", env), max_concurrency=1,
                **resources_per_rank,
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
            try:
                ray_result(ref, self.who(rank_of[ref]), what)
            except WorkerDied:
                raise
            except RuntimeError:
                self._raise_if_a_peer_died(rank_of, ref, what)
                raise
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
                ray_result(ref, self.who(rank_of[ref]), what)
            except WorkerDied:
                raise
            except Exception:
                continue

    def submit(self, verb: Verb, *args, **kwargs) -> List[Any]:
        """Start a worker method on every rank without waiting; `wait(refs, verb)` collects."""
        return [getattr(w, verb.__name__).remote(*args, **kwargs) for w in self.workers]

    def call(self, verb: Verb, *args, **kwargs) -> List[Any]:
        """Every rank's answer to a collective worker method, under the phase deadline."""
        return self.wait(self.submit(verb, *args, **kwargs), verb)

    def wait(self, refs: List[Any], verb: Verb) -> List[Any]:
        return self._get(refs, verb.__name__, self.phase_timeout_s)

    # ---------------------------------------------------------------- verbs

    def submit_log_probs(self, batch: Batch, micro_batch_size: int,
                         like_update: Optional[tuple] = None, with_routes: bool = False,
                         replay: Optional[str] = None) -> List[Any]:
        """`compute_log_probs` started on every rank (`wait(refs, MegatronWorker.
        compute_log_probs)[0]` is rank 0's {"log_probs", "span"}): two roles' passes can run
        at once."""
        return self.submit(MegatronWorker.compute_log_probs, batch, micro_batch_size, False,
                           like_update, with_routes, replay, self.model)

    def compute_log_probs(self, batch: Batch, micro_batch_size: int,
                          like_update: Optional[tuple] = None, with_routes: bool = False,
                          replay: Optional[str] = None) -> Dict[str, Any]:
        return self.call(MegatronWorker.compute_log_probs, batch, micro_batch_size, False,
                         like_update, with_routes, replay, self.model)[0]

    def start_setup(self, setup: RoleSetup, hosted: Sequence[RoleSetup] = ()) -> List[Any]:
        """Begin building every rank's engine, and those of the `hosted` roles beside it
        (returns at once, so roles set up in parallel); `wait_setup(refs)` gives each rank's
        pid."""
        addr, port = self._get([self.workers[0].master_address.remote()], "master_address")[0]
        return [w.setup.remote(setup, addr, port, tuple(hosted)) for w in self.workers]

    def wait_setup(self, refs: List[Any]) -> List[int]:
        """Each rank's pid once its engine is built (no deadline: not a phase of the step)."""
        self.pids = self._get(refs, "setup")
        return self.pids

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


class HostedRoleGroup(RoleGroup):
    """A role whose model lives in another role's ranks (config/placement.host_of): the same
    verbs, sent to the host's processes with `model` naming this role; the host starts and
    ends the processes."""

    def __init__(self, role: str, host: RoleGroup):
        self.role, self.model, self.host = role, role, host
        self.world_size, self.phase_timeout_s = host.world_size, host.phase_timeout_s
        self.placement_group, self.first_bundle = host.placement_group, host.first_bundle
        self.workers = host.workers

    @property
    def pids(self) -> List[Optional[int]]:
        return self.host.pids

    def who(self, rank: int) -> str:
        return f"{self.role} in {self.host.who(rank)}"

    def start_setup(self, setup: RoleSetup, hosted: Sequence[RoleSetup] = ()) -> List[Any]:
        raise RuntimeError(f"{self.role} is built by {self.host.role}'s ranks: pass its setup "
                           f"to their start_setup")

    def shutdown(self, graceful: bool = True) -> None:
        """Nothing of its own to end: the host's shutdown ends the processes."""


class RewardModelGroup(RoleGroup):
    """The reward model's ranks: a score per sample."""

    def compute_scores(self, batch: Batch, micro_batch_size: int):
        return self.call(MegatronWorker.compute_scores, batch, micro_batch_size)[0]


class ActorGroup(RoleGroup):
    """The actor's ranks: updates, checkpoints, offload, and the weight sync to the engines."""

    def submit_update(self, batch: Batch, mini_batch_size: int, shuffle: bool, seed: int,
                      entropy_coeff: Optional[float], replay: Optional[str] = None) -> List[Any]:
        """The update started on every rank (the caller may work meanwhile); `wait_update`
        gives rank 0's metrics."""
        return self.submit(MegatronWorker.update, batch, mini_batch_size, shuffle, seed,
                           entropy_coeff, replay)

    def wait_update(self, refs: List[Any]) -> Dict[str, float]:
        return self.wait(refs, MegatronWorker.update)[0]

    def save_checkpoint(self, save_dir: str, iteration: int, extra: dict, save_optim: bool,
                        save_rng: bool) -> None:
        self.call(MegatronWorker.save_checkpoint, save_dir, iteration, extra, save_optim,
                  save_rng)

    def load_checkpoint(self, ckpt_dir: str, load_optim: bool, load_rng: bool) -> dict:
        return self.call(MegatronWorker.load_checkpoint, ckpt_dir, load_optim, load_rng)[0]

    def offload(self, param: bool, grad: bool, optimizer: bool) -> None:
        self.call(MegatronWorker.offload, param, grad, optimizer)

    def onload(self) -> None:
        self.call(MegatronWorker.onload)

    def attach_engines(self, engines: Sequence[Any], engine_nodes: Sequence[str],
                       bucket_mb: float) -> None:
        self.call(MegatronWorker.attach_engines, engines, engine_nodes, bucket_mb)

    def sync_weights(self, verify: bool, defer_check: bool = False) -> Dict[str, float]:
        """One weight sync; the resharding host's stats."""
        return self.call(MegatronWorker.sync_weights, verify, defer_check)[0]

    def settle_sync(self) -> None:
        """The last sync's deferred check, waited for on every rank (the host raises)."""
        self.call(MegatronWorker.settle_sync)


ROLE_GROUPS = {"actor": ActorGroup, "ref": RoleGroup, "reward": RewardModelGroup,
               "teacher": RoleGroup}
