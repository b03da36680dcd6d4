"""Megatron-core's MoE code without Transformer Engine, on any device.

megatron/core/transformer/moe/moe_utils.py imports `te_general_gemm` only when Transformer
Engine imports, yet its router's gating linear (RouterGatingLinearFunction, every MoE
forward and backward) tests `te_general_gemm is not None` unconditionally: without TE every
MoE forward raises `NameError: name 'te_general_gemm' is not defined`, on CPU and on a GPU
alike. Binding the name to None makes the router take its own torch matmul, the same maths.
"""

from __future__ import annotations


def bind_te_general_gemm() -> None:
    """Give moe_utils the `te_general_gemm = None` it reads when TE is missing. Idempotent;
    a no-op where TE bound the real one."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
