"""One rank of a Megatron role (actor, reference, reward model or teacher) inside a Ray actor.

A rank may also hold another role's model (a colocated reference or teacher at the same
layout, built on the same process groups: config/placement.host_of); only its own engine is
ever saved or synced to the rollout engines. Every actor rank takes part in the weight sync;
its TP0/PP0/DP0 rank is the resharding host, which feeds the rollout engines (Ray actors of
their own, mindrl/rollout) through `weight_sync.EngineFanout`. Methods that return data return
it from rank 0 only (None elsewhere).
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional, Sequence

import torch

from mindrl import startup
from mindrl.config.roles import RoleSetup
from mindrl.data.batch import Batch


class MegatronWorker:
    def __init__(self, role: str, rank: int, world_size: int):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        self.role, self.rank, self.world_size = role, rank, world_size
        self.engine = self.weight_sync = self._store = None
        self.hosted = {}        # role -> the engine of a role this rank also holds

    # ---------------------------------------------------------------- setup

    def master_address(self):
        """(node address, port) of the rendezvous store this rank (rank 0) now listens on and
        hands to its own init in `setup`."""
        import ray

        from mindrl import device

        self._store = device.listening_store()
        return ray.util.get_node_ip_address(), self._store.port

    def setup(self, setup: RoleSetup, master_addr: str, master_port: int,
              hosted: Sequence[RoleSetup] = ()) -> int:
        """Join the role's process groups and build this rank's engine; `hosted`: the setups
        of roles whose models this rank also holds (a colocated reference at the same layout:
        config/placement.host_of), built on the same process groups."""
        from mindrl import device
        from mindrl.models.builder import initialize_parallel

        os.environ["MASTER_ADDR"] = master_addr
        device.set_compute_threads(setup.cpu_threads)
        device.init_distributed(self.rank, self.world_size, master_addr, master_port,
                                store=self._store)
        initialize_parallel(setup.parallel, seed=setup.seed)
        self.engine = self._build(setup)
        for other in hosted:
            if other.parallel.model_parallel_layout != setup.parallel.model_parallel_layout:
                raise ValueError(f"{other.role} cannot live in the {setup.role}'s processes: "
                                 f"its layout {other.parallel} differs from {setup.parallel}")
            self.hosted[other.role] = (self._adapters_off(other) if other.adapters_off_of
                                       else self._build(other))
        startup.started()
        return os.getpid()

    def _adapters_off(self, setup: RoleSetup):
        """A role that is the actor's base with its adapters off (a LoRA actor's reference)."""
        from mindrl.engines.megatron_engine import AdaptersOff

        if setup.adapters_off_of != self.role:
            raise ValueError(f"{setup.role} is the {setup.adapters_off_of}'s base, but this "
                             f"rank holds the {self.role}")
        return AdaptersOff(self.engine)

    @staticmethod
    def _build(setup: RoleSetup):
        """A role's engine on the process groups already set up, loaded from its checkpoint."""
        from mindrl.ckpt.mcore_io import load_mcore_checkpoint
        from mindrl.engines.megatron_engine import MegatronEngine
        from mindrl.engines.role_model import model_builder

        engine = MegatronEngine(setup.spec, setup.parallel, setup.params_dtype,
                                setup.micro_batch_size, optim=setup.optim, loss=setup.loss,
                                pad_id=setup.pad_id, seed=setup.seed,
                                build_model=model_builder(setup.spec, setup.load,
                                                          setup.freeze_vision_tower),
                                packed=setup.pack_sequences,
                                max_tokens_per_micro_batch=setup.max_tokens_per_micro_batch,
                                moe=setup.moe, lora=setup.lora)
        if setup.load:
            load_mcore_checkpoint(engine.module, setup.load)
            if engine.optimizer is not None:
                engine.optimizer.reload_model_params()
        return engine

    # ---------------------------------------------------------------- training role

    def compute_log_probs(self, batch: Batch, micro_batch_size: int,
                          with_entropy: bool = False, like_update: Optional[tuple] = None,
                          with_routes: bool = False, replay: Optional[str] = None,
                          model: Optional[str] = None):
        """{"log_probs" [B, R], ("entropy"), ("routes"), "span": (start, end) wall-clock
        seconds of this pass, so the driver can show two roles' passes overlapping} on rank 0.
        like_update: (mini_batch_size, shuffle, seed) of the update this pass feeds (the same
        plan); with_routes / replay: routing replay (models/route_replay.py); model: a hosted
        role whose model answers (None: this rank's own)."""
        start = time.time()
        engine = self.hosted[model] if model else self.engine
        out = engine.compute_log_probs(batch, micro_batch_size, with_entropy, like_update,
                                       with_routes=with_routes, replay=replay)
        if self.rank != 0:
            return None
        return {**{k: v.cpu() for k, v in out.items()}, "span": (start, time.time())}

    def compute_scores(self, batch: Batch, micro_batch_size: int):
        """Reward role: one float per sample (rank 0; None elsewhere)."""
        scores = self.engine.compute_scores(batch, micro_batch_size)
        return scores.cpu() if self.rank == 0 else None

    def update(self, batch: Batch, mini_batch_size: int, shuffle: bool,
               seed: int, entropy_coeff: Optional[float] = None, replay: Optional[str] = None):
        # A deferred check of the last sync decides first: no update on samples generated
        # from weights the engines may not hold.
        self.settle_sync()
        metrics = self.engine.update(batch, mini_batch_size, shuffle=shuffle, seed=seed,
                                     entropy_coeff=entropy_coeff, replay=replay)
        return metrics if self.rank == 0 else None

    def save_checkpoint(self, save_dir: str, iteration: int, extra: dict, save_optim: bool,
                        save_rng: bool):
        self.engine.save_checkpoint(save_dir, iteration, extra, save_optim, save_rng)

    def load_checkpoint(self, ckpt_dir: str, load_optim: bool, load_rng: bool):
        meta = self.engine.load_checkpoint(ckpt_dir, load_optim, load_rng)
        return meta if self.rank == 0 else None

    def offload(self, param: bool, grad: bool, optimizer: bool) -> int:
        return self.engine.offload(param, grad, optimizer)

    def onload(self) -> int:
        return self.engine.onload()

    # ---------------------------------------------------------------- weight sync (actor)

    def attach_engines(self, engines: Sequence[Any], engine_nodes: Sequence[str],
                       bucket_mb: float) -> None:
        """Build this rank's side of the weight sync (a collective over the actor's ranks;
        weight_sync/manager.build_rank_sync), after sweeping /dev/shm files of runs whose
        processes are gone."""
        from mindrl import shared_memory
        from mindrl.weight_sync.manager import build_rank_sync

        shared_memory.sweep_stale()
        self.weight_sync = build_rank_sync(self.engine.model, self.engine.spec, engines,
                                           engine_nodes, bucket_mb)

    def sync_weights(self, verify: bool = False, defer_check: bool = False):
        stats = self.weight_sync.sync(verify=verify, defer_check=defer_check)
        return stats if self.weight_sync.is_host else None

    def settle_sync(self) -> None:
        """Wait for the last sync's deferred check (WeightSyncError if the engines differ)."""
        if self.weight_sync is not None:
            self.weight_sync.settle()

    def shutdown(self) -> None:
        """Let go of the weight sync and remove its /dev/shm files on this node (Ray ends the
        actor without running finalizers)."""
        if self.weight_sync is not None:
            self.weight_sync.close()
        self.weight_sync = None
