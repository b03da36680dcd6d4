"""How fast this machine multiplies matrices, measured in the bench's own process: the rate a
FLOP floor is priced at (CPU, a thread count) and the device's rate an MFU divides by."""

from __future__ import annotations

import time
from typing import Tuple


def matmul_gflops(threads: int, bf16: bool = False, seconds: float = 3.0,
                  shape: Tuple[int, int, int] = (4096, 768, 2048)) -> float:
    """GEMM rate at the model's layer sizes ([m, k] x [k, n]), with the benchmark's thread
    count, in fp32 or (a bf16 shape) in bf16: the fastest the machine multiplies in the
    shape's precision."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if bf16 else torch.float32
    m, k, n = shape
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    torch.mm(a, b)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        reps += 1
    rate = 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9
    torch.set_num_threads(previous)
    return rate


def matmul_tflops(dtype, dev, n: int = 4096, reps: int = 10) -> float:
    """Square [n, n] products on `dev` in `dtype` after three warm-ups, device-synchronised."""
    import torch

    from mindrl import device

    a = torch.randn(n, n, dtype=dtype, device=dev)
    b = torch.randn(n, n, dtype=dtype, device=dev)
    for _ in range(3):
        a @ b
    device.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    device.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t) / 1e12
