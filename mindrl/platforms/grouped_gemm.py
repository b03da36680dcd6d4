"""torch's grouped matrix multiply (`torch._grouped_mm`): many experts' GEMMs in one call.

Whether it runs is asked of the device, never assumed: torch 2.13 runs it on CPU (fp32 and
bf16, forward and backward, bit-identical to a loop of matmuls) and on CUDA where its kernels
cover the GPU and dtype; a device or dtype where the probe fails (an NPU's torch, an old GPU)
keeps Megatron's experts one by one. Whether it is the default is measured: on CPU a whole MoE
update ran within +-10% of the experts one by one (the GEMMs alone 1.5x faster, the weight
stacking eating it: docs/benchmarks.md#bench_moe), so there the recipe has to ask for it
(`moe_grouped_gemm: true`); on CUDA it is one kernel for all experts instead of one launch
each, the default (not yet measured here: a GPU session's bench_moe says)."""

from __future__ import annotations

import torch

DEFAULT_ON = {"cpu": False, "cuda": True, "npu": False}   # null's choice per device kind


def grouped_mm(x: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Rows x[ends[e-1]:ends[e]] times weights[e] ([E, in, out]), for every e, in one call.
    ends: int32 cumulative row counts per group."""
    return torch._grouped_mm(x, weights, offs=ends)


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether grouped_mm runs here and equals the loop it replaces (forward and gradients,
    uneven and empty groups included)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(7, 16, generator=g).to(device, dtype).requires_grad_(True)
        w = torch.randn(3, 16, 8, generator=g).to(device, dtype).requires_grad_(True)
        counts = [4, 0, 3]
        ends = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
        grad = torch.randn(7, 8, generator=g).to(device, dtype)
        out = grouped_mm(x, w, ends)
        out.backward(grad)
        xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        ref = torch.cat([part @ wr[e] for e, part in enumerate(torch.split(xr, counts))])
        ref.backward(grad)
        tol = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5
        return all(torch.allclose(a.float(), b.float(), atol=tol, rtol=tol)
                   for a, b in ((out, ref), (x.grad, xr.grad), (w.grad, wr.grad)))
    except (RuntimeError, NotImplementedError, TypeError):
        return False
