"""Normalisation layers that work with Megatron's sequence parallelism on every device.

Megatron-core's local spec norm (`WrappedTorchNorm`) refuses sequence parallelism, and its
SP-capable norms need Transformer Engine or apex. A plain torch RMSNorm / LayerNorm is correct
under SP as long as its gradient is summed over the TP group: each TP rank normalises its own
slice of the sequence, so each holds a partial gradient of the (replicated) weight. Megatron's
`finalize_model_grads` does that sum for every parameter marked ``sequence_parallel = True``
(docs/platforms.md#sequence-parallel-on-cpu: loss identical with and without SP, norm grads
within 3e-8).
"""

from __future__ import annotations

import torch

_NORMS = {"RMSNorm": torch.nn.RMSNorm, "LayerNorm": torch.nn.LayerNorm}


class SequenceParallelNorm:
    """A torch norm built with Megatron's norm signature (`build_module` needs a class and
    passes config, hidden_size, eps); its parameters carry the ``sequence_parallel`` flag
    that makes `finalize_model_grads` all-reduce them over TP."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_fusion_flags):
        try:
            norm_cls = _NORMS[config.normalization]
        except KeyError:
            raise ValueError(f"normalization {config.normalization!r}: use one of "
                             f"{sorted(_NORMS)}") from None
        # In the params dtype, as Megatron's own norms: a bf16 model with fp32 norms mixes
        # dtypes in one optimizer group, and Megatron's optimizers then map a param to another's
        # fp32 main copy when saving (tests/engines/test_megatron_bf16.py).
        norm = norm_cls(hidden_size, eps=eps, dtype=config.params_dtype)
        for param in norm.parameters():
            param.sequence_parallel = bool(config.sequence_parallel)
        return norm
