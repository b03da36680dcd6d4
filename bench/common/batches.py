"""Batches of the lengths RL produces (prompts of many lengths, completions mostly short with a
long tail) and the packed layout an update plans for them: the shape packed-vs-padded figures
are measured on."""

from __future__ import annotations

import math

PACK_MICRO_BATCH = 4   # padded rows per micro batch; the packed budget is as many longest samples


def natural_batch(vocab, B, P, R, seed=0, mean_fraction=0.3, fixed_response=False):
    """B samples of natural-looking lengths: prompts uniform in P/8..P (left-padded), responses
    lognormal (sigma 1) with a mean about `mean_fraction` x R, clipped to 1..R (right-padded to
    the longest, as a rollout returns them), or all R tokens (`fixed_response`); advantages per
    sample, as GRPO gives them."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pl = torch.randint(max(1, P // 8), P + 1, (B,), generator=g)
    mu = math.log(mean_fraction * R) - 0.5
    rl = (mu + torch.randn(B, generator=g)).exp().round().clamp(1, R).long()
    if fixed_response:
        rl = torch.full_like(rl, R)
    P, R = int(pl.max()), int(rl.max())
    pm = (torch.arange(P) >= P - pl[:, None]).long()
    rm = (torch.arange(R) < rl[:, None]).long()
    return {"prompt_ids": torch.randint(1, vocab, (B, P), generator=g) * pm, "prompt_mask": pm,
            "response_ids": torch.randint(1, vocab, (B, R), generator=g) * rm,
            "response_mask": rm, "advantages": torch.randn(B, 1, generator=g) * rm}


def pack_layout(b: dict) -> dict:
    """The batch's real tokens, the tokens of its padded rows, and the packed token budget
    (PACK_MICRO_BATCH x the longest sample)."""
    from mindrl.data.rows import sample_lengths

    lengths = sample_lengths(b["prompt_mask"], b["response_mask"])
    rows = len(lengths) * (int(b["prompt_mask"].sum(1).max()) + b["response_ids"].shape[1])
    return {"real_tokens": int(lengths.sum()), "padded_tokens": rows,
            "budget": PACK_MICRO_BATCH * int(lengths.max()), "lengths": lengths.tolist()}
