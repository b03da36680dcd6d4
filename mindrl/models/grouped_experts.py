"""A MoE layer's experts in two grouped GEMMs instead of a loop over experts.

Megatron's SequentialMLP runs each local expert's MLP on its tokens in turn; its grouped
alternatives need a CUDA package (legacy GroupedMLP) or Transformer Engine (TEGroupedMLP), and
hold the experts as stacked weights the checkpoint and sync tables would have to map anew.
`GroupedExperts` is a SequentialMLP (the same per-expert parameters, names, sharded checkpoint
and sync paths) whose forward stacks the local experts' fc1 and fc2 weights and runs each as
one grouped GEMM over the permuted tokens (the device's, `device.grouped_gemm`); the activation
and the routing-probability scale between them are the MLP's own elementwise maths on all
tokens at once. Chosen per device and dtype (`moe_grouped_gemm: null`: where it runs and the
device kind's measured default says so), asked for (`true`: refused where the device has none)
or turned off (`false`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from mindrl import device


def supports(config) -> bool:
    """The MLP settings the grouped forward reproduces: SwiGLU experts without biases, no
    clamp or offset, no FP8/FP4, probabilities applied after the activation (Qwen3-MoE's)."""
    return bool(config.gated_linear_unit and config.activation_func is F.silu
                and not config.add_bias_linear and not config.use_te_activation_func
                and config.activation_func_clamp_value is None
                and not config.glu_linear_offset and not config.moe_apply_probs_on_input
                and not getattr(config, "fp8", None) and not getattr(config, "fp4", None))


def choose(config, asked) -> bool:
    """Whether the MoE layers run GroupedExperts: `asked` (the recipe's moe_grouped_gemm)
    true / false, or None: where the device has a grouped GEMM in the params dtype and it is
    this device's default (device.grouped_gemm_by_default: CUDA yes, CPU no, measured)."""
    if asked is False:
        return False
    available = supports(config) and device.grouped_gemm(config.params_dtype) is not None
    if asked and not available:
        why = ("its MLP settings (biases, activation or FP8) are not the SwiGLU experts the "
               "grouped forward reproduces" if not supports(config) else
               f"this device has no grouped GEMM in {config.params_dtype} "
               "(mindrl/platforms/grouped_gemm.py)")
        raise ValueError(f"moe_grouped_gemm: true, but {why}; set "
                         "megatron_training.moe_grouped_gemm: null (the device's choice) or "
                         "false (experts one by one)")
    return available and (bool(asked) or device.grouped_gemm_by_default())


@functools.lru_cache(maxsize=None)
def grouped_experts_class():
    """GroupedExperts, a subclass of megatron-core's SequentialMLP (imported when built)."""
    from megatron.core.transformer.moe.experts import SequentialMLP

    class GroupedExperts(SequentialMLP):
        def forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):
            x = permuted_local_hidden_states
            if self.num_local_experts == 1 or x.shape[0] == 0:
                return super().forward(x, tokens_per_expert, permuted_probs)
            grouped_mm = device.grouped_gemm(x.dtype)
            counts = torch.as_tensor(tokens_per_expert).to(device=x.device, dtype=torch.int64)
            ends = counts.cumsum(0).to(torch.int32)
            experts = self.local_experts
            fc1 = torch.stack([e.linear_fc1.weight for e in experts]).transpose(1, 2)
            hidden = grouped_mm(x, fc1, ends)
            hidden = _swiglu_scaled(hidden, permuted_probs, self.config)
            fc2 = torch.stack([e.linear_fc2.weight for e in experts]).transpose(1, 2)
            return grouped_mm(hidden, fc2, ends), None

    return GroupedExperts


def _swiglu_scaled(x: torch.Tensor, probs: torch.Tensor, config) -> torch.Tensor:
    """The expert MLP's activation and probability scale, as megatron's MLP.forward computes
    them for the settings `supports` accepts (fused or not), on every token at once."""
    if config.bias_activation_fusion:
        from megatron.core.fusions.fused_bias_swiglu import weighted_bias_swiglu_impl

        return weighted_bias_swiglu_impl(x, None, probs.unsqueeze(-1),
                                         config.activation_func_fp8_input_store)
    gate, linear = torch.chunk(x, 2, dim=-1)
    out = config.activation_func(gate) * linear
    return (out * probs.unsqueeze(-1)).to(out.dtype)
