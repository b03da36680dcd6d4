"""Log-probabilities and entropy from vocab-parallel logits, without gathering the vocabulary.

Each TP rank holds logits for a slice of the (padded) vocabulary; the reductions that need the
whole vocabulary (max, sum of exp) are all-reduced across the TP group. Padded vocabulary rows
are masked to -inf so that Megatron's distribution equals the HF / vLLM one.

The engine's passes use `response_token_stats`: only the response positions, in chunks of
tokens, so fp32 copies of the logits stay bounded whatever the sequence length and micro batch.
`token_log_probs` / `entropy` work on every position (tests and the parity tools use them).
"""

from __future__ import annotations

import functools
from typing import Optional, Tuple

import torch

# Tokens per chunk in response_token_stats: at a 152k vocabulary and TP1 one fp32 slab of
# 512 x 152064 is 311 MB (a pass holds about two at once).
DEFAULT_CHUNK_TOKENS = 512


@functools.lru_cache(maxsize=None)
def device_chunk_kernels():
    """The chunk kernels compiled for this device, or None (eager in-place chunks)."""
    from mindrl import device
    from mindrl.engines.vocab_chunks import ChunkKernels

    compile_fn = device.fused_kernels()
    return None if compile_fn is None else ChunkKernels.compiled(compile_fn)


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


def _all_reduce(tensor: torch.Tensor, op) -> torch.Tensor:
    _, tp_size = _tp()
    if tp_size > 1:
        from megatron.core import parallel_state as ps

        torch.distributed.all_reduce(tensor, op=op, group=ps.get_tensor_model_parallel_group())
    return tensor


def _shifted_chunk(logits: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                   vocab_size: int, temperature: float,
                   global_max: Optional[torch.Tensor] = None):
    """fp32 logits / T at the chunk's positions [c, V/TP], padded vocabulary at -inf, minus
    the row's max over the whole (TP) vocabulary; and that max [c]."""
    scaled = _chunk_rows(logits, rows, cols).float()   # a copy: the in-place ops are safe
    scaled.div_(temperature)
    scaled = mask_padded_vocab(scaled, vocab_size)
    if global_max is None:
        global_max = _all_reduce(scaled.max(dim=-1).values, torch.distributed.ReduceOp.MAX)
    return scaled.sub_(global_max.unsqueeze(-1)), global_max


def _local_targets(targets: torch.Tensor, shard: int):
    """Column of each target in this rank's vocabulary slice, and whether it is here."""
    rank, _ = _tp()
    local = targets - rank * shard
    here = (local >= 0) & (local < shard)
    return local.clamp(0, shard - 1), here


class _ResponseStats(torch.autograd.Function):
    """log p(target) and entropy at chosen positions of vocab-parallel logits, chunk by chunk.

    Nothing of size [chunk, V/TP] is kept for backward: it recomputes each chunk's softmax
    from the logits (already alive as the model's output) and three saved scalars per token,
    with no collective (the gradient of the local slice needs only global per-token sums).
    """

    @staticmethod
    def forward(ctx, logits, rows, cols, targets, vocab_size, temperature, chunk_tokens,
                kernels):
        n = rows.numel()
        shard = logits.shape[-1]
        out = torch.empty(3, n, dtype=torch.float32, device=logits.device)  # max, lse, E[z]
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        ctx.vocab_size, ctx.temperature, ctx.chunk_tokens = vocab_size, temperature, chunk_tokens
        ctx.kernels = kernels
        if kernels is not None:
            _fused_forward(kernels, logits, rows, cols, targets, vocab_size, temperature,
                           chunk_tokens, out, logp)
            ctx.save_for_backward(logits, rows, cols, targets, out)
            ctx.set_materialize_grads(False)
            return logp, out[1] - out[2]
        with torch.no_grad():
            for start in range(0, n, chunk_tokens):
                part = slice(start, start + chunk_tokens)
                shifted, global_max = _shifted_chunk(logits, rows[part], cols[part],
                                                     vocab_size, temperature)
                local, here = _local_targets(targets[part], shard)
                target_logit = shifted.gather(1, local.unsqueeze(1))[:, 0]
                target_logit = torch.where(here, target_logit, torch.zeros_like(target_logit))
                probs = torch.exp(shifted)   # unnormalised
                sum_exp = probs.sum(-1)
                # exp(-inf) = 0 and 0 * -inf = nan: padded (and underflowed) columns add 0.
                shifted.masked_fill_(probs == 0, 0.0)
                sum_exp_shifted = probs.mul_(shifted).sum(-1)
                del probs, shifted
                sums = _all_reduce(torch.stack([sum_exp, sum_exp_shifted, target_logit]),
                                   torch.distributed.ReduceOp.SUM)
                log_sum_exp = torch.log(sums[0])
                logp[part] = sums[2] - log_sum_exp
                out[0, part] = global_max
                out[1, part] = log_sum_exp
                out[2, part] = sums[1] / sums[0]   # E_p[shifted logit]
        ctx.save_for_backward(logits, rows, cols, targets, out)
        ctx.set_materialize_grads(False)
        return logp, out[1] - out[2]   # entropy = log sum exp - E_p[z] (shift-invariant)

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        logits, rows, cols, targets, out = ctx.saved_tensors
        grad_logits = torch.zeros(logits.shape, dtype=logits.dtype, device=logits.device)
        if grad_logp is None and grad_entropy is None:
            return grad_logits, None, None, None, None, None, None, None
        if ctx.kernels is not None:
            _fused_backward(ctx, logits, rows, cols, targets, out, grad_logp, grad_entropy,
                            grad_logits)
            return grad_logits, None, None, None, None, None, None, None
        shard = logits.shape[-1]
        # Accumulated into a [mb * S, V/TP] view with index_add_ (a packed row repeats a
        # sample's last position past its end, with zero gradient there).
        flat_grad, flat_index = grad_logits.view(-1, shard), rows * logits.shape[1] + cols
        for start in range(0, rows.numel(), ctx.chunk_tokens):
            part = slice(start, start + ctx.chunk_tokens)
            shifted, _ = _shifted_chunk(logits, rows[part], cols[part], ctx.vocab_size,
                                        ctx.temperature, global_max=out[0, part])
            probs = (shifted - out[1, part].unsqueeze(-1)).exp_()
            # d logp / dz_j = [j = target] - p_j;  d H / dz_j = -p_j (z_j - E_p[z])
            if grad_entropy is not None:   # coef reuses the shifted slab
                coef = shifted.sub_(out[2, part].unsqueeze(-1)).mul_(
                    -grad_entropy[part].float().unsqueeze(-1))
            else:
                coef = shifted.zero_()
            if grad_logp is not None:
                coef.sub_(grad_logp[part].float().unsqueeze(-1))
            coef.masked_fill_(probs == 0, 0.0)   # padded columns: p = 0, z = -inf
            grad = probs.mul_(coef)
            if grad_logp is not None:
                local, here = _local_targets(targets[part], shard)
                grad.scatter_add_(1, local.unsqueeze(1),
                                  torch.where(here, grad_logp[part].float(),
                                              torch.zeros_like(grad_logp[part].float()))
                                  .unsqueeze(1))
            grad.div_(ctx.temperature)
            flat_grad.index_add_(0, flat_index[part], grad.to(grad_logits.dtype))
            del shifted, probs, coef, grad   # before the next chunk allocates its slabs
        return grad_logits, None, None, None, None, None, None, None


def _valid_columns(shard: int, vocab_size: int) -> int:
    """Columns of this rank's vocabulary slice that are real (the rest is padding)."""
    rank, _ = _tp()
    return max(0, min(shard, vocab_size - rank * shard))


def _chunk_rows(logits, rows, cols):
    """A copy of the chunk's logits [c, V/TP] in their own dtype: one gather kernel on a
    [mb * S, V/TP] view where the logits are contiguous."""
    if logits.is_contiguous():
        return logits.view(-1, logits.shape[-1]).index_select(0, rows * logits.shape[1] + cols)
    return logits[rows, cols]


def _fused_forward(kernels, logits, rows, cols, targets, vocab_size, temperature,
                   chunk_tokens, out, logp) -> None:
    shard = logits.shape[-1]
    valid = _valid_columns(shard, vocab_size)
    with torch.no_grad():
        for start in range(0, rows.numel(), chunk_tokens):
            part = slice(start, start + chunk_tokens)
            chunk = _chunk_rows(logits, rows[part], cols[part])
            global_max = _all_reduce(kernels.max(chunk, temperature, valid),
                                     torch.distributed.ReduceOp.MAX)
            local, here = _local_targets(targets[part], shard)
            sums = _all_reduce(kernels.sums(chunk, temperature, valid, global_max, local, here),
                               torch.distributed.ReduceOp.SUM)
            log_sum_exp = torch.log(sums[0])
            logp[part] = sums[2] - log_sum_exp
            out[0, part] = global_max
            out[1, part] = log_sum_exp
            out[2, part] = sums[1] / sums[0]


def _fused_backward(ctx, logits, rows, cols, targets, out, grad_logp, grad_entropy,
                    grad_logits) -> None:
    shard = logits.shape[-1]
    valid = _valid_columns(shard, ctx.vocab_size)
    flat_grad, flat_index = grad_logits.view(-1, shard), rows * logits.shape[1] + cols
    zeros = torch.zeros(rows.numel(), dtype=torch.float32, device=logits.device)
    g_logp = zeros if grad_logp is None else grad_logp.float()
    g_entropy = zeros if grad_entropy is None else grad_entropy.float()
    for start in range(0, rows.numel(), ctx.chunk_tokens):
        part = slice(start, start + ctx.chunk_tokens)
        local, here = _local_targets(targets[part], shard)
        grad = ctx.kernels.grad(_chunk_rows(logits, rows[part], cols[part]), ctx.temperature,
                                valid,
                                out[0, part], out[1, part], out[2, part], g_logp[part],
                                g_entropy[part], local, here)
        flat_grad.index_add_(0, flat_index[part], grad)


_DEVICE_KERNELS = "device"


def response_token_stats(logits: torch.Tensor, positions: torch.Tensor, targets: torch.Tensor,
                         vocab_size: int, temperature: float = 1.0,
                         chunk_tokens: int = DEFAULT_CHUNK_TOKENS, kernels=_DEVICE_KERNELS
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """log p(targets) and entropy [mb, R] under softmax(logits / T), at `positions` only.

    logits [mb, S, V/TP] (any dtype, vocab-parallel) or one packed row [1, T, V/TP] that
    `positions` index for every sample; positions [mb, R] (the logit predicting each response
    token), targets [mb, R] (the token ids). Differentiable in `logits`.
    Memory bound: apart from the gradient the model's output needs anyway ([mb, S, V/TP] in
    the logits' dtype), a pass holds at most two fp32 slabs of chunk_tokens x V/TP x 4 bytes
    (plus a bool slab), never a [mb, S, V] fp32 copy; forward and backward alike.
    kernels: a vocab_chunks.ChunkKernels to run each chunk through (the fused kernels; a
    chunk of the logits' dtype and no fp32 slab between ops), None for the eager in-place
    path; by default the device's (`device.fused_kernels`: compiled on CUDA, eager on CPU).
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    mb, r = positions.shape
    if logits.shape[0] == 1:    # a packed row (or a single padded row): positions index it
        rows = torch.zeros(mb * r, dtype=torch.long, device=logits.device)
    else:
        rows = torch.arange(mb, device=logits.device).repeat_interleave(r)
    if kernels is _DEVICE_KERNELS:
        kernels = device_chunk_kernels()
    logp, ent = _ResponseStats.apply(logits, rows, positions.reshape(-1).to(logits.device),
                                     targets.reshape(-1).to(logits.device), vocab_size,
                                     float(temperature), int(chunk_tokens), kernels)
    return logp.view(mb, r), ent.view(mb, r)
