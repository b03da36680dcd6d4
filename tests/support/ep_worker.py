"""Rank bodies for the expert-parallel tests (run under mindrl.distributed.spawn_local): an
engine at any EP loaded from a full Megatron state dict (each EP rank its block of experts),
and full parameters gathered back under the tables' global names."""

import torch

from mindrl.ckpt import mapping
from mindrl.data.batch import Batch
from mindrl.config.roles import MoETraining
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
from mindrl.models.builder import Parallelism, initialize_parallel
from mindrl.models.expert_names import expert_number, global_name, holder, renumbered


def ep_local_state(full, spec, ep_rank, ep_size):
    """This EP rank's part of a full (TP1 PP1) state dict: its experts under local numbers."""
    out = {}
    for name, t in full.items():
        g = expert_number(name)
        if g is None:
            out[name] = t
            continue
        rank, local = holder(g, spec.moe.num_experts, ep_size)
        if rank == ep_rank:
            out[renumbered(name, local)] = t
    return out


def ep_engine(spec, full, ep, train=True, seed=1234, dispatcher="alltoall"):
    from megatron.core import parallel_state as ps

    parallel = Parallelism(expert_model_parallel_size=ep)
    initialize_parallel(parallel, seed)
    engine = MegatronEngine(spec, parallel, micro_batch_size=2, loss=LossConfig(),
                            optim=OptimConfig(lr=1e-3, clip_grad=1.0) if train else None,
                            moe=MoETraining(token_dispatcher_type=dispatcher))
    local = ep_local_state(mapping.stage_state_dict(full, spec, 0, 1, 0, 1), spec,
                           ps.get_expert_model_parallel_rank(), ep)
    missing, unexpected = engine.module.load_state_dict(local, strict=False)
    assert not unexpected and all(n.endswith("_extra_state") for n in missing), (missing,
                                                                              unexpected)
    if train:
        engine.optimizer.reload_model_params()
    return engine


def full_params(engine, ep):
    """{global name: tensor} of the whole model on every rank (experts gathered over EP)."""
    from megatron.core import parallel_state as ps

    n_local = engine.spec.moe.num_experts // ep
    mine = {global_name(n, ps.get_expert_model_parallel_rank(), n_local): p.detach().clone()
            for n, p in engine.module.named_parameters()}
    parts = [None] * ps.get_expert_model_parallel_world_size()
    torch.distributed.all_gather_object(parts, mine, group=ps.get_expert_model_parallel_group())
    out = {}
    for part in parts:
        out.update(part)
    return out


def ep_steps(rank, world, spec, full, batches, ep):
    """Two updates at EP `ep` in this world (DP = world): each step's metrics and the full
    parameters after, on rank 0."""
    from megatron.core import parallel_state as ps

    engine = ep_engine(spec, full, ep)
    metrics = [engine.update(Batch.of(**b), mini_batch_size=b["response_ids"].shape[0])
               for b in batches]
    params = full_params(engine, ep)
    local_experts = sum(1 for n, _ in engine.module.named_parameters()
                        if n.endswith("local_experts.0.linear_fc1.weight"))
    names = sorted(n for n, _ in engine.module.named_parameters()
                   if expert_number(n) is not None)
    ps.destroy_model_parallel()
    return {"metrics": metrics, "params": params, "layers": local_experts,
            "expert_names": names} if rank == 0 else None
