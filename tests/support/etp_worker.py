"""Rank bodies for the expert-tensor-parallel tests (run under mindrl.distributed.spawn_local):
an engine at TP x expert TP x EP loaded from a full Megatron state dict (the dense tensors TP
shards, each expert an expert-TP shard on the EP rank that holds it), and the full parameters
put back together under the tables' global names."""

import os

import torch

from mindrl.ckpt import mapping
from mindrl.config.roles import MoETraining
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine
from mindrl.models.builder import Parallelism, initialize_parallel
from mindrl.models.expert_names import expert_number, global_name

from support.ep_worker import ep_local_state, loaded_engine


def layout_parallel(tp, etp, ep):
    return Parallelism(tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
                       expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)


def etp_local_state(full, spec, tp, etp, ep):
    """This rank's state dict: dense tensors its TP shard, experts its expert-TP shard of its
    EP rank's block (local numbers)."""
    from megatron.core import parallel_state as ps

    dense = mapping.stage_state_dict(full, spec, ps.get_tensor_model_parallel_rank(), tp, 0, 1)
    experts = mapping.stage_state_dict(full, spec, ps.get_expert_tensor_parallel_rank(), etp,
                                       0, 1)
    out = {n: t for n, t in dense.items() if expert_number(n) is None}
    out.update(ep_local_state({n: t for n, t in experts.items() if expert_number(n) is not None},
                              spec, ps.get_expert_model_parallel_rank(), ep))
    return out


def etp_engine(spec, full, tp, etp, ep, dispatcher, train=True, seed=1234, lr=1e-3, clip=1.0):
    from megatron.core import parallel_state as ps

    def local_state():
        assert ps.get_expert_tensor_parallel_world_size() == etp
        assert ps.get_expert_model_parallel_world_size() == ep
        return etp_local_state(full, spec, tp, etp, ep)

    return loaded_engine(spec, layout_parallel(tp, etp, ep), local_state, train, seed,
                         dispatcher, lr, clip)


def full_params(engine, spec):
    """{global name: full tensor} of the whole model on every rank (world = one replica):
    each rank's shards with their (expert) TP rank, put together through the tables."""
    from megatron.core import parallel_state as ps

    ep_rank, ep = ps.get_expert_model_parallel_rank(), ps.get_expert_model_parallel_world_size()
    n_local = spec.moe.num_experts // ep
    mine = {}
    for n, p in engine.module.named_parameters():
        expert = expert_number(n) is not None
        shard = (ps.get_expert_tensor_parallel_rank() if expert
                 else ps.get_tensor_model_parallel_rank())
        mine[global_name(n, ep_rank, n_local)] = (shard, p.detach().clone())
    parts = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, mine)
    shards = {}
    for part in parts:
        for name, (rank, t) in part.items():
            shards.setdefault(name, {})[rank] = t
    out = {}
    for name, by_rank in shards.items():
        rule, _ = mapping.rule_for(name, spec)
        out[name] = mapping.gather(rule, [by_rank[r] for r in sorted(by_rank)])
    return out


def etp_steps(rank, world, spec, full, batches, tp, etp, ep, dispatcher):
    """Two updates at (TP, expert TP, EP): each step's metrics, the full parameters after,
    and how many experts of each layer this rank holds and of what shape, on rank 0."""
    from megatron.core import parallel_state as ps

    engine = etp_engine(spec, full, tp, etp, ep, dispatcher)
    metrics = [engine.update(Batch.of(**b), mini_batch_size=b["response_ids"].shape[0])
               for b in batches]
    params = full_params(engine, spec)
    fc1 = [tuple(p.shape) for n, p in engine.module.named_parameters()
           if n.startswith("decoder.layers.0.") and n.endswith("linear_fc1.weight")
           and expert_number(n) is not None]
    ps.destroy_model_parallel()
    return {"metrics": metrics, "params": params, "fc1": fc1} if rank == 0 else None


def resume_across_etp(rank, world, spec, full, batches, save, load, save_dir):
    """One update at layout `save` (tp, etp, ep, dispatcher), save, then log-probs and a
    second update; a fresh engine at layout `load` loads the checkpoint with Adam's state
    and does the same: each side's log-probs, second-step metrics, parameters before and
    after it and the load's notes, on rank 0."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir

    def after_load(engine):
        logp = engine.compute_log_probs(Batch.of(**batches[1]))["log_probs"]
        params = full_params(engine, spec)
        step = engine.update(Batch.of(**batches[1]), mini_batch_size=batches[1][
            "response_ids"].shape[0])
        return {"log_probs": logp, "params": params, "step": step,
                "after": full_params(engine, spec)}

    engine = etp_engine(spec, full, *save)
    engine.update(Batch.of(**batches[0]), mini_batch_size=batches[0]["response_ids"].shape[0])
    engine.save_checkpoint(save_dir, 1)
    saved = after_load(engine)
    ps.destroy_model_parallel()
    fresh = etp_engine(spec, full, *load, seed=99)
    meta = fresh.load_checkpoint(iteration_dir(save_dir, 1), load_optim=True)
    out = {"saved": saved, "loaded": {**after_load(fresh), "notes": meta.get("notes", [])}}
    ps.destroy_model_parallel()
    return out if rank == 0 else None


def sync_from_etp(rank, world, spec, vllm_dir, layout_dir, full, prompts, gen_cfg, layout):
    """An actor at `layout` (tp, etp, ep, dispatcher) over 2 ranks syncs into a vLLM TP1 on
    rank 0, verified per expert; vLLM's log-probs against the actor's before and after a
    step; how many expert tensors each rank kept (sent from) and received."""
    from megatron.core import parallel_state as ps

    from mindrl.engines.vllm_process import VLLMEngineProcess
    from mindrl.weight_sync.resharder import Resharder
    from support.ep_worker import sync_step_sync
    from support.reshard_worker import _max_diff, _rollout

    vllm = VLLMEngineProcess(vllm_dir, gen_cfg) if rank == 0 else None
    try:
        engine = etp_engine(spec, full, *layout, lr=1e-2, clip=0.0)
        res, resharder = sync_step_sync(engine, spec, vllm, layout_dir, prompts)
        resharder.close()
        # The transport for engines the ranks cannot reach through host memory: full
        # tensors put together on the host over the collective backend (gather_tp).
        os.environ["MINDRL_RESHARD_SHM"] = "0"
        try:
            collective = Resharder(engine.model, spec, target=vllm, bucket_mb=0.1)
            res["sync_collective"] = collective.sync(verify=True)
            collective.close()
        finally:
            del os.environ["MINDRL_RESHARD_SHM"]
        batch3 = _rollout(vllm, prompts, seed=302)
        res["diff_collective"] = _max_diff(
            batch3["rollout_log_probs"], engine.compute_log_probs(Batch.of(**batch3))[
                "log_probs"], batch3["response_mask"].float())
        ps.destroy_model_parallel()
    finally:
        if vllm is not None:
            vllm.close()
    return res if rank == 0 else None


def load_converted(rank, world, spec, ckpt_dir, layout):
    """The converter's checkpoint loaded (as the workers load `load:`) into an engine at
    `layout` (tp, etp, ep, dispatcher): its full parameters, on rank 0."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.mcore_io import load_mcore_checkpoint

    tp, etp, ep, dispatcher = layout
    initialize_parallel(layout_parallel(tp, etp, ep))
    engine = MegatronEngine(spec, layout_parallel(tp, etp, ep), micro_batch_size=2,
                            loss=LossConfig(), moe=MoETraining(token_dispatcher_type=dispatcher))
    load_mcore_checkpoint(engine.module, ckpt_dir)
    params = full_params(engine, spec)
    ps.destroy_model_parallel()
    return params if rank == 0 else None
