"""Log-probabilities and entropy from vocab-parallel logits, without gathering the vocabulary.

Each TP rank holds logits for a slice of the (padded) vocabulary; the reductions that need the
whole vocabulary (max, sum of exp) are all-reduced across the TP group. Padded vocabulary rows
are masked to -inf so that Megatron's distribution equals the HF / vLLM one.
"""

from __future__ import annotations

import torch


def _tp():
    from megatron.core import parallel_state as ps

    return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()


def mask_padded_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """-inf on rows >= vocab_size in this rank's vocabulary slice."""
    rank, _ = _tp()
    shard = logits.shape[-1]
    start = rank * shard
    if start + shard <= vocab_size:
        return logits
    keep = (torch.arange(start, start + shard, device=logits.device) < vocab_size)
    return logits.masked_fill(~keep, float("-inf"))


def token_log_probs(logits: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                    temperature: float = 1.0) -> torch.Tensor:
    """log p(target) under softmax(logits / T), [..., V/TP] x [...] -> [...]; differentiable."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    scaled = mask_padded_vocab(logits.float() / temperature, vocab_size)
    return -vocab_parallel_cross_entropy(scaled, targets)


def entropy(logits: torch.Tensor, vocab_size: int, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / T) over the full vocabulary; differentiable."""
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    scaled = mask_padded_vocab(logits.float() / temperature, vocab_size)
    local_max = scaled.max(dim=-1, keepdim=True).values.detach()
    global_max = local_max.clone()
    _, tp_size = _tp()
    if tp_size > 1:
        from megatron.core import parallel_state as ps

        torch.distributed.all_reduce(global_max, op=torch.distributed.ReduceOp.MAX,
                                     group=ps.get_tensor_model_parallel_group())
    shifted = scaled - global_max
    exp = torch.exp(shifted)
    # exp(-inf) = 0 and 0 * -inf = nan: padded rows must not contribute.
    weighted = torch.where(torch.isfinite(shifted), exp * shifted, torch.zeros_like(exp))
    sums = torch.stack([exp.sum(-1), weighted.sum(-1)], dim=-1)
    sums = reduce_from_tensor_model_parallel_region(sums) if tp_size > 1 else sums
    sum_exp, sum_exp_shifted = sums.unbind(-1)
    return torch.log(sum_exp) - sum_exp_shifted / sum_exp
