"""A device's packed (varlen) causal attention kernel, where one exists.

CUDA: torch's flash-attention varlen entry (`torch.nn.attention.varlen.varlen_attn`, torch >=
2.9), half precision only (flash attention has no fp32 kernel). CPU has none (torch's varlen has
no CPU kernel; docs/platforms.md#packed-sequences-on-cpu) and NPU's is not wired yet: there the
caller runs exact SDPA per sequence.

Its keywords changed between releases, so the adapter reads the signature:
- 2.9: `is_causal` and no `scale` (the scale then goes into q: softmax(q k^T * s) equals
  softmax((q * s * sqrt(d)) k^T / sqrt(d)), the kernel's default);
- later (2.10; 2.11 as far as the public sources show): keyword-only `scale` and `window_size`
  ((-1, 0) is causal; it must be that tuple: the wrapper tests `window_size == (-1, 0)`, which
  a list fails silently), key and value with as many heads as the query (grouped KV heads are
  repeated here);
- 2.12 on: `enable_gqa` as well (grouped KV heads passed as they are).
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
    takes_scale = "scale" in params

    def attend(q, k, v, cu_seqlens, max_seqlen: int, scale: float):
        extra = dict(causal)
        if q.shape[1] != k.shape[1]:
            if native_gqa:
                extra["enable_gqa"] = True
            else:   # query head h reads KV head h // groups, as SDPA's enable_gqa does
                groups = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if takes_scale:
            extra["scale"] = scale
        elif scale is not None:
            q = q * (scale * q.shape[-1] ** 0.5)
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **extra)

    return attend
