"""Rank body for the response-only log-prob tests: the chunked response_token_stats against
the every-position token_log_probs / entropy on the same vocab-parallel logits, values and
gradients, at TP1 and TP2, for each way of running a chunk (run under
mindrl.distributed.spawn_local)."""

import functools

import torch

from mindrl.engines import vocab_parallel
from mindrl.models.builder import Parallelism, initialize_parallel


def chunk_kernels(name):
    """eager: the in-place path; plain: vocab_chunks' functions as they are; compiled: those
    functions through torch.compile on this device."""
    from mindrl.engines.vocab_chunks import ChunkKernels

    return {"eager": lambda: None, "plain": ChunkKernels.plain,
            "compiled": lambda: ChunkKernels.compiled(
                functools.partial(torch.compile, dynamic=True))}[name]()


def compare_at_tp(rank, world, full_logits, positions, targets, vocab_size, temperature,
                  chunk_tokens, tp_sizes, kernel_names=("eager",)):
    """{(tp, kernels): the largest differences} for every TP size and chunk runner."""
    mb, r = positions.shape
    weights = torch.randn(2, mb, r, generator=torch.Generator().manual_seed(7),
                          dtype=torch.float64).float()
    out = {}
    for tp in tp_sizes:
        for name in kernel_names:
            out[(tp, name)] = _compare(full_logits, positions, targets, vocab_size, temperature,
                                       chunk_tokens, tp, chunk_kernels(name), weights)
    return out


def _compare(full_logits, positions, targets, vocab_size, temperature, chunk_tokens, tp,
             kernels, weights):
    from megatron.core import parallel_state as ps

    initialize_parallel(Parallelism(tensor_model_parallel_size=tp))
    shard = full_logits.shape[-1] // tp
    tp_rank = ps.get_tensor_model_parallel_rank()
    local = full_logits[..., tp_rank * shard:(tp_rank + 1) * shard].clone()

    all_targets = torch.zeros(full_logits.shape[:2], dtype=torch.long)
    all_targets.scatter_(1, positions, targets)

    def every_position(leaf):   # today's path: every position, then the response ones
        logp = vocab_parallel.token_log_probs(leaf, all_targets, vocab_size, temperature)
        ent = vocab_parallel.entropy(leaf, vocab_size, temperature)
        return torch.gather(logp, 1, positions), torch.gather(ent, 1, positions)

    def response_only(leaf):
        return vocab_parallel.response_token_stats(leaf, positions, targets, vocab_size,
                                                   temperature, chunk_tokens, kernels)

    with torch.no_grad():
        old, new = every_position(local.clone()), response_only(local.clone())
    diffs = {"log_probs": (new[0] - old[0]).abs().max().item(),
             "entropy": (new[1] - old[1]).abs().max().item()}
    # Gradients of log-probs alone, entropy alone, and both (the loss's three shapes);
    # a fresh graph each time (Megatron's cross entropy backward works in place).
    for name, mix in (("grad_logp", (1, 0)), ("grad_entropy", (0, 1)), ("grad_both", (1, 1))):
        grads = []
        for stats_of in (every_position, response_only):
            leaf = local.clone().requires_grad_(True)
            stats = stats_of(leaf)
            loss = sum(m * (w * s).sum() for m, w, s in zip(mix, weights, stats) if m)
            grads.append(torch.autograd.grad(loss, leaf)[0])
        diffs[name] = (grads[0] - grads[1]).abs().max().item()
        diffs[name + "_scale"] = grads[0].abs().max().item()
    ps.destroy_model_parallel()
    return diffs
