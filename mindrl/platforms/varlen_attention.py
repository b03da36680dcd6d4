"""A device's packed (varlen) causal attention kernel, where one exists.

CUDA: torch's flash-attention varlen entry (`torch.nn.attention.varlen.varlen_attn`, torch >=
2.9), half precision only (flash attention has no fp32 kernel). CPU has none (torch's varlen has
no CPU kernel; PLATFORM_NOTES "Packed sequences on CPU") and NPU's is not wired yet: there the
caller runs exact SDPA per sequence.
"""

from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch

HALF = (torch.float16, torch.bfloat16)


def cuda_varlen(dtype: torch.dtype) -> Optional[Callable]:
    """attend(q [T, Hq, D], k, v [T, Hkv, D], cu_seqlens [n+1] int32, max_seqlen, scale) ->
    [T, Hq, D], causal within each sequence; None where torch has no such kernel for dtype."""
    if dtype not in HALF:
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    native_gqa = "enable_gqa" in params

    def attend(q, k, v, cu_seqlens, max_seqlen: int, scale: float):
        extra = dict(causal)
        if q.shape[1] != k.shape[1]:
            if native_gqa:
                extra["enable_gqa"] = True
            else:
                groups = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                           scale=scale, **extra)

    return attend
