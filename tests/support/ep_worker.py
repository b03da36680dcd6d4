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


def loaded_engine(spec, parallel, local_state, train=True, seed=1234, dispatcher="alltoall",
                  lr=1e-3, clip=1.0, max_tokens=None):
    """A MegatronEngine at `parallel` holding `local_state()` (this rank's state dict, asked
    for once the parallel groups exist); `max_tokens`: micro batches by that many real tokens
    (packed rows), else 2 samples."""
    initialize_parallel(parallel, seed)
    engine = MegatronEngine(spec, parallel, micro_batch_size=2, loss=LossConfig(),
                            optim=OptimConfig(lr=lr, clip_grad=clip) if train else None,
                            moe=MoETraining(token_dispatcher_type=dispatcher),
                            packed=max_tokens is not None, max_tokens_per_micro_batch=max_tokens)
    missing, unexpected = engine.module.load_state_dict(local_state(), strict=False)
    assert not unexpected and all(n.endswith("_extra_state") for n in missing), (missing,
                                                                              unexpected)
    if train:
        engine.optimizer.reload_model_params()
    return engine


def ep_engine(spec, full, ep, train=True, seed=1234, dispatcher="alltoall", lr=1e-3, clip=1.0,
              max_tokens=None):
    """An engine at EP `ep` (TP 1), each EP rank holding its block of `full`'s experts."""
    from megatron.core import parallel_state as ps

    return loaded_engine(
        spec, Parallelism(expert_model_parallel_size=ep),
        lambda: ep_local_state(mapping.stage_state_dict(full, spec, 0, 1, 0, 1), spec,
                               ps.get_expert_model_parallel_rank(), ep),
        train, seed, dispatcher, lr, clip, max_tokens)


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


def ep_steps(rank, world, spec, full, batches, ep, max_tokens=None):
    """Two updates at EP `ep` in this world (DP = world): each step's metrics, the full
    parameters after and the micro batches each DP rank ran, on rank 0."""
    from megatron.core import parallel_state as ps

    engine = ep_engine(spec, full, ep, max_tokens=max_tokens)
    plans = [engine._plan(Batch.of(**b), engine.micro_batch_size) for b in batches]
    metrics = [engine.update(Batch.of(**b), mini_batch_size=b["response_ids"].shape[0])
               for b in batches]
    params = full_params(engine, ep)
    local_experts = sum(1 for n, _ in engine.module.named_parameters()
                        if n.endswith("local_experts.0.linear_fc1.weight"))
    names = sorted(n for n, _ in engine.module.named_parameters()
                   if expert_number(n) is not None)
    ps.destroy_model_parallel()
    return {"metrics": metrics, "params": params, "layers": local_experts,
            "expert_names": names, "plans": plans} if rank == 0 else None


def sync_from_ep2(rank, world, spec, vllm_dir, layout_dir, full, prompts, gen_cfg):
    """An EP2 actor (TP1, DP2: each rank 4 experts a layer) syncs into a vLLM TP1 on rank 0,
    verified per expert; vLLM's log-probs against the actor's before and after a step."""
    from megatron.core import parallel_state as ps

    from mindrl.engines.vllm_process import VLLMEngineProcess

    vllm = VLLMEngineProcess(vllm_dir, gen_cfg) if rank == 0 else None
    try:
        engine = ep_engine(spec, full, 2, lr=1e-2, clip=0.0)
        res, _ = sync_step_sync(engine, spec, vllm, layout_dir, prompts)
        ps.destroy_model_parallel()
    finally:
        if vllm is not None:
            vllm.close()
    return res if rank == 0 else None


def sync_step_sync(engine, spec, vllm, layout_dir, prompts):
    """A verified sync of `engine` into `vllm` (rank 0's; None elsewhere), checked against the
    converted HF dir; vLLM's log-probs against the engine's; one update; a second verified
    sync and the log-probs again. (the results, the resharder, still open)."""
    from mindrl.ckpt.fingerprint import checkpoint_fingerprint
    from mindrl.weight_sync.resharder import Resharder
    from support.reshard_worker import _max_diff, _rollout

    resharder = Resharder(engine.model, spec, target=vllm, bucket_mb=0.1)
    res = {"sync": resharder.sync(verify=True),
           "experts_kept": sum(expert_number(n) is not None for n in resharder.source.params)}
    if vllm is not None:     # mapping-free: vLLM now equals the converted HF dir
        vllm.check_fingerprint(checkpoint_fingerprint(layout_dir, vllm.dtype))
    batch = _rollout(vllm, prompts, seed=300)
    mask = batch["response_mask"].float()
    old = engine.compute_log_probs(Batch.of(**batch))["log_probs"]
    res["diff_before"] = _max_diff(batch["rollout_log_probs"], old, mask)
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(batch["response_ids"].shape[0], 1, generator=g).sign()
    engine.update(Batch.of(**batch, advantages=adv.expand_as(mask) * mask),
                  mini_batch_size=batch["response_ids"].shape[0])
    res["sync_after"] = resharder.sync(verify=True)
    batch2 = _rollout(vllm, prompts, seed=301)
    new = engine.compute_log_probs(Batch.of(**batch2))["log_probs"]
    moved = engine.compute_log_probs(Batch.of(**batch))["log_probs"]
    res["diff_after"] = _max_diff(batch2["rollout_log_probs"], new,
                                  batch2["response_mask"].float())
    res["diff_new_vs_old"] = _max_diff(moved, old, mask)
    return res, resharder


def resume_across_ep(rank, world, spec, full, batches, save_ep, load_ep, save_dir):
    """One update at EP `save_ep`, save, then log-probs and a second update; a fresh engine at
    EP `load_ep` loads the checkpoint with Adam's state (layout_change.py maps it between one
    optimizer and the dense + expert pair) and does the same, and so does one that starts Adam
    afresh: each side's log-probs, second-step metrics, parameters before and after it and the
    load's notes, on rank 0."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir

    def after_load(engine, ep):
        logp = engine.compute_log_probs(Batch.of(**batches[1]))["log_probs"]
        params = full_params(engine, ep)
        step = engine.update(Batch.of(**batches[1]), mini_batch_size=batches[1][
            "response_ids"].shape[0])
        return {"log_probs": logp, "params": params, "step": step,
                "after": full_params(engine, ep)}

    engine = ep_engine(spec, full, save_ep)
    engine.update(Batch.of(**batches[0]), mini_batch_size=batches[0]["response_ids"].shape[0])
    engine.save_checkpoint(save_dir, 1)
    saved = after_load(engine, save_ep)
    ps.destroy_model_parallel()
    out = {"saved": saved}
    for name, load_optim in (("loaded", True), ("fresh_adam", False)):
        fresh = ep_engine(spec, full, load_ep)
        meta = fresh.load_checkpoint(iteration_dir(save_dir, 1), load_optim=load_optim)
        out[name] = {**after_load(fresh, load_ep), "notes": meta.get("notes", [])}
        ps.destroy_model_parallel()
    return out if rank == 0 else None
