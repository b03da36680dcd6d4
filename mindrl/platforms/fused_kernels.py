"""Which devices compile MindRL's elementwise chunk maths into fused kernels (torch.compile).

CUDA with Triton: yes (inductor's GPU backend; checked on an H200 with torch 2.11). CPU: no
(inductor's C++ backend works where a compiler exists, but the eager in-place path is already
memory-lean there and a compile costs seconds at every worker's start). NPU: no, until
torch_npu's compile backend is checked. TORCHDYNAMO_DISABLE=1 turns torch.compile into the
plain functions, which stay exact.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Callable, Optional


@functools.lru_cache(maxsize=None)
def compiler_for(device_type: str) -> Optional[Callable]:
    if device_type != "cuda" or importlib.util.find_spec("triton") is None:
        return None
    import torch

    return functools.partial(torch.compile, dynamic=True)
