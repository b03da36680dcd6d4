"""Rank body for the grouped-experts test: the same tiny Qwen3-MoE weights built with
experts one by one and grouped, at a layout; one forward and backward of each."""

import torch

from mindrl.ckpt import mapping
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel


def grads_by_experts(rank, world_size, spec, full_by_tp, tokens, layouts, dtype="fp32"):
    """{(tp, ep, grouped): (local logits, {name: local grad}, experts class)} from rank 0."""
    from megatron.core import parallel_state as ps

    out = {}
    for tp, ep in layouts:
        for grouped in (False, True):
            parallel = Parallelism(tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
                                   expert_model_parallel_size=ep)
            initialize_parallel(parallel)
            model = build_gpt_model(spec, parallel, dtype, moe_grouped_gemm=grouped)
            local = mapping.stage_state_dict(full_by_tp[tp], spec,
                                             ps.get_tensor_model_parallel_rank(), tp, 0, 1)
            local = {k: v.to(next(model.parameters()).dtype) for k, v in local.items()}
            if ep > 1:
                local = _local_experts(local, ps.get_expert_model_parallel_rank(),
                                       spec.moe.num_experts // ep)
            missing, unexpected = model.load_state_dict(local, strict=False)
            assert not unexpected and all(k.endswith("_extra_state") for k in missing), missing
            model.train()
            positions = torch.arange(tokens.shape[1]).expand_as(tokens)
            logits = model(tokens, positions, None)
            weight = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3)
                                 ).to(logits.dtype)
            (logits * weight).sum().backward()
            experts = type(model.decoder.layers[0].mlp.experts).__name__
            if rank == 0:
                out[(tp, ep, grouped)] = (
                    logits.detach().float().clone(),
                    {n: p.grad.detach().float().clone() for n, p in model.named_parameters()
                     if p.grad is not None}, experts)
            ps.destroy_model_parallel()
    return out if rank == 0 else None


def _local_experts(state, ep_rank, num_local):
    """The full-expert table's entries for this expert-parallel rank, renumbered locally."""
    from mindrl.models import expert_names

    kept = {}
    for name, value in state.items():
        number = expert_names.expert_number(name)
        if number is None:
            kept[name] = value
        elif number // num_local == ep_rank:
            kept[expert_names.renumbered(name, number % num_local)] = value
    return kept
