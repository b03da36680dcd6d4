"""Tiny Qwen2.5-VL inputs and the rank body of the parity tests (test_qwen25vl_parity.py).

One spawn runs every parallel layout in turn (TP1, TP2, TP2 + sequence parallel, PP2), so
the ranks pay Megatron's start-up once.
"""

import torch

from mindrl.algorithms import ppo_clip_loss
from mindrl.ckpt import mapping

from support.tiny_vl import (IMAGE_PAD, MERGE, PATCH, PIXEL_ROW, PROMPT_GRIDS,  # noqa: F401
                             TEMPORAL_PATCH, VIDEO_PAD, VISION_END, VISION_START, VOCAB,
                             megatron_schedule, padded_tokens, prompts, tiny_vl_config,
                             tiny_vl_model)

RESPONSE_TOKENS = 4                                # loss on each prompt's last 4 tokens
ADVANTAGES = [1.0, -0.5, 2.0]


def grpo_loss(logits_fn, samples):
    """GRPO's clipped surrogate (on-policy: ratio 1) over each prompt's last RESPONSE_TOKENS
    tokens, with fixed per-prompt advantages; logits_fn(b) -> (next-token log-probs [L - 1])."""
    logp = torch.stack([logits_fn(b)[-RESPONSE_TOKENS:] for b in range(len(samples))])
    adv = torch.tensor(ADVANTAGES).unsqueeze(1).expand_as(logp)
    loss, _ = ppo_clip_loss(logp, logp.detach(), adv, torch.ones_like(logp))
    return loss


# ---------------------------------------------------------------- rank body

def _build(hf_config, hf_state, tp, pp, sp=False, freeze=False):
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.families.qwen25_vl import build_qwen25_vl_model
    from support.mcore_load import load_hf_state_dict

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                           sequence_parallel=sp)
    initialize_parallel(parallel)
    model = build_qwen25_vl_model(hf_config, parallel, freeze_vision_tower=freeze,
                                  make_vocab_size_divisible_by=4)
    load_hf_state_dict(model, hf_state)
    return model


def _logits(hf_config, hf_state, samples, tp, pp, sp):
    """Full-vocab logits [B, S, VOCAB] on the last stage's TP rank 0, else None."""
    from megatron.core import parallel_state as ps

    from mindrl.models.forward import gather_vocab_parallel

    model = _build(hf_config, hf_state, tp, pp, sp).eval()
    # One micro batch of all prompts (images of several samples in one batch), or under PP
    # one prompt per micro batch (images travel with their micro batch through the pipeline).
    micro_batch_size = 1 if pp > 1 else len(samples)
    with torch.no_grad():
        out = megatron_schedule(model, samples, micro_batch_size, True,
                        lambda o, _: gather_vocab_parallel(o))
    keep = out and ps.get_tensor_model_parallel_rank() == 0 and ps.get_data_parallel_rank() == 0
    ps.destroy_model_parallel()
    return torch.cat(out)[..., :VOCAB].clone() if keep else None


def _full_hf_grads(module, spec):
    """{HF name: gradient} of this TP2 stage: TP shards gathered, fused tensors split."""
    from megatron.core import parallel_state as ps

    group, size = ps.get_tensor_model_parallel_group(), ps.get_tensor_model_parallel_world_size()
    out = {}
    for name, param in module.named_parameters():
        grad = getattr(param, "main_grad", None)
        if mapping.is_vision_tensor(name):
            out[name] = None if grad is None else grad.clone()
            continue
        rule, layer = mapping.rule_for(name, spec)
        shards = [torch.empty_like(grad) for _ in range(size)]
        torch.distributed.all_gather(shards, grad.contiguous(), group=group)
        out.update(mapping.mcore_to_hf(rule, mapping.gather(rule, shards), spec, layer))
    return out


def _optimized_params(optimizer):
    """ids of the model parameters the optimizer updates (a distributed optimizer's groups
    hold fp32 shards, so its model-parameter map is asked)."""
    ids = set()
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        index = getattr(opt, "model_param_group_index_map", None)
        params = index if index is not None else [p for g in opt.param_groups for p in g["params"]]
        ids.update(id(p) for p in params)
    return ids


def _grads(hf_config, hf_state, samples, sp, freeze=False):
    """Gradients of grpo_loss at TP2 the way the engine makes them: Megatron DDP, the
    pipeline schedule's backward, finalize_model_grads; plus what the optimizer holds."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import (DistributedDataParallel,
                                           DistributedDataParallelConfig, finalize_model_grads)
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from mindrl.engines import vocab_parallel

    module = _build(hf_config, hf_state, 2, 1, sp, freeze)
    config = module.config
    ddp = DistributedDataParallel(config=config, module=module, ddp_config=(
        DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True)))
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, params_dtype=config.params_dtype,
                        use_distributed_optimizer=True), [ddp])
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = ddp.no_sync
    ddp.train()
    ddp.zero_grad_buffer()

    def loss_fn(output, micro):
        targets = torch.cat([micro["tokens"][:, 1:], micro["tokens"][:, :1]], dim=1)
        logp = vocab_parallel.token_log_probs(output, targets, VOCAB)
        lengths = [len(s["input_ids"]) for s in samples]
        return grpo_loss(lambda b: logp[b, :lengths[b] - 1], samples), {}

    megatron_schedule(ddp, samples, len(samples), False, loss_fn)
    in_optimizer = _optimized_params(optimizer)
    vision = [p for n, p in module.named_parameters() if mapping.is_vision_tensor(n)]
    result = {"grads": _full_hf_grads(module, module.spec),
              "vision_requires_grad": any(p.requires_grad for p in vision),
              "vision_in_optimizer": sum(id(p) in in_optimizer for p in vision),
              "vision_params": len(vision)}
    ps.destroy_model_parallel()
    return result if torch.distributed.get_rank() == 0 else None


def run_layouts(rank, world_size, hf_config, hf_state, samples):
    """Logits at TP1, TP2, TP2 + SP and PP2; GRPO gradients at TP2 (with and without SP) and
    with the vision tower frozen."""
    out = {"logits": {}}
    for tp, pp, sp in [(1, 1, False), (2, 1, False), (2, 1, True), (1, 2, False)]:
        logits = _logits(hf_config, hf_state, samples, tp, pp, sp)
        if logits is not None:
            out["logits"][(tp, pp, sp)] = logits
    out["grads"] = {sp: _grads(hf_config, hf_state, samples, sp) for sp in (False, True)}
    out["frozen"] = _grads(hf_config, hf_state, samples, sp=False, freeze=True)
    return out
