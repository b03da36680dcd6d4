"""vLLM's CPU fused-MoE kernel, worker side: re-preparing expert layers after a weight load,
and reading each expert back through the kernel itself (for fingerprints).

The CPU kernel (vLLM's ``CPUUnquantizedExperts``) prepacks ``w13_weight`` [E, 2I, H] and
``w2_weight`` [E, H, I] into its grouped-GEMM layout (same shape, elements permuted) once, in
the first ``process_weights_after_loading``. vLLM re-runs that step on later loads only up to
the kernel's own preparation (``UnquantizedFusedMoEMethod._setup_kernel`` skips it once a
kernel exists), and a plain ``load_weights`` never runs it: every update after the first
leaves plain bytes that the kernel reads as packed, silently (log-probs off by 0.11 to 1.3;
docs/platforms.md#qwen3-and-qwen3-moe-probes). `refresh_moe_layers` re-runs it.

`expert_products` reads what the kernel computes with, so a stale pack shows: it runs the
kernel on the layer's own weights with a companion matrix and biases of its own, chosen so
that each expert's output is linear in the weights being read (silu is the identity far
above zero).
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

import torch

# A gate pre-activation this far above zero makes silu / gelu the identity in fp32
# (exp(-32) is below fp32's resolution of 1).
_LINEAR_FROM = 32.0
_C = 2 * _LINEAR_FROM      # the bias that moves the gate there; the probe adds < _LINEAR_FROM
_LINEAR_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def cpu_experts(layer):
    """The CPU kernel of `layer` when it is a vLLM expert layer whose weights that kernel
    repacks; None otherwise (other modules, zentorch's kernel, which keeps them as loaded)."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    kernel = getattr(getattr(layer, "quant_method", None), "moe_kernel", None)
    experts = getattr(kernel, "fused_experts", None)
    if isinstance(experts, CPUUnquantizedExperts) and not experts._use_zentorch:
        return experts
    return None


def refresh_moe_layers(model, loaded_modules: Optional[Iterable[str]] = None) -> int:
    """Re-run the CPU MoE kernel's weight preparation on every expert layer among
    `loaded_modules` (vLLM module names; None: all of `model`'s), after their weights were
    written: returns how many layers it prepared. A layer whose expert width vLLM pads (to a
    multiple of 32) is refused: a load writes its unpadded width, which the kernel's padding
    step would misplace."""
    names = ([name for name, _ in model.named_modules()] if loaded_modules is None
             else list(loaded_modules))
    prepared = 0
    for name in names:
        layer = model.get_submodule(name)
        experts = cpu_experts(layer)
        if experts is None:
            continue
        config = experts.moe_config
        width = config.intermediate_size_per_partition
        if experts._padded_intermediate_size(config) != width:
            raise NotImplementedError(
                f"{name}: vLLM's CPU MoE kernel pads the expert width {width} per TP rank to a "
                f"multiple of {experts._intermediate_alignment()}; weight updates of such a layer "
                f"are not supported: pick an infer TP that keeps it a multiple")
        with torch.no_grad():
            experts.process_weights_after_loading(layer)
        prepared += 1
    return prepared


def _run(layer, experts, x, w13, w2, bias13, ids) -> torch.Tensor:
    """The kernel on tokens `x`, token i through expert ids[i] with weight 1."""
    from vllm._custom_ops import cpu_fused_moe

    out = torch.zeros(x.shape[0], w2.shape[1], dtype=x.dtype)
    cpu_fused_moe(out, x.contiguous(), w13, w2, bias13, None,
                  torch.ones(x.shape[0], 1, dtype=torch.float32),
                  ids.to(torch.int32)[:, None].contiguous(), layer.activation.value, experts.isa,
                  False)
    return out.float()


def _w13_outputs(layer, experts, p, scale, up_bias) -> torch.Tensor:
    """h(x) - h(-x) over each expert's intermediate rows [E, Ipad], x = scale_e p, with the
    gate biased by _C and the up rows by `up_bias`, read through a companion w2 that copies
    h out (in chunks of H rows). With act(C + g) = C + g and h = (C + g)(u + b):
    h(x) - h(-x) = 2 scale (C u + b g)."""
    from vllm._custom_ops import cpu_prepack_moe_weight

    w13 = layer.w13_weight
    experts_n, two_i, hidden = w13.shape
    padded = two_i // 2
    dtype = w13.dtype
    x = (scale[:, None] * p[None, :]).to(dtype)
    tokens = torch.cat([x, -x])
    ids = torch.arange(experts_n).repeat(2)
    bias = torch.zeros(experts_n, two_i, dtype=dtype)
    bias[:, :padded] = _C
    bias[:, padded:] = up_bias
    out = torch.empty(experts_n, padded)
    for start in range(0, padded, hidden):
        rows = min(hidden, padded - start)
        copier = torch.zeros(experts_n, hidden, padded, dtype=dtype)
        copier[:, :rows, start:start + rows] = torch.eye(rows, dtype=dtype)
        h = _run(layer, experts, tokens, w13, cpu_prepack_moe_weight(copier, experts.isa),
                 bias, ids)[:, :rows]
        out[:, start:start + rows] = h[:experts_n] - h[experts_n:]
    return out


def expert_products(layer, p: torch.Tensor, q: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """(gate p, up p, down q) of every expert of `layer` on this rank, [E, I], [E, I], [E, H],
    as the CPU kernel computes with the layer's weights now (`p`: a probe over the hidden
    size; `q`: one over this rank's unpadded expert width). Falls back to the weights as
    loaded where the kernel keeps them so."""
    experts = cpu_experts(layer)
    if experts is None:
        return loaded_expert_products(layer, p, q)
    if layer.activation.value not in _LINEAR_ACTIVATIONS:
        raise NotImplementedError(f"expert fingerprints through the CPU kernel: activation "
                                  f"{layer.activation.value} has no linear range")
    w13 = layer.w13_weight
    experts_n, two_i, hidden = w13.shape
    padded, width = two_i // 2, q.numel()
    p = p.float()
    # Keep |x . w| near _LINEAR_FROM / 2 (in the linear range, and large beside C for
    # precision): first from a bound that permuting elements keeps (max |w| * |p|_1), then
    # from what the first pass measured.
    bound = w13.detach().abs().amax(dim=(1, 2)).float() * p.abs().sum()
    scale = _LINEAR_FROM / 2 / bound.clamp(min=1e-12)
    up = _w13_outputs(layer, experts, p, scale, 0.0) / (2 * _C * scale[:, None])
    both = _w13_outputs(layer, experts, p, scale, _C) / (2 * _C * scale[:, None])
    measured = torch.maximum((both - up).abs().amax(1), up.abs().amax(1))
    scale = _LINEAR_FROM / 2 / measured.clamp(min=1e-12)
    both = _w13_outputs(layer, experts, p, scale, _C) / (2 * _C * scale[:, None])
    gate = both - up
    # Down: no input, a zero w13 (packing keeps zeros) and the up bias q: h = act(C) q = C q.
    dtype = w13.dtype
    bias = torch.zeros(experts_n, two_i, dtype=dtype)
    bias[:, :padded] = _C
    bias[:, padded:padded + width] = q.to(dtype)
    down = _run(layer, experts, torch.zeros(experts_n, hidden, dtype=dtype),
                torch.zeros_like(w13), layer.w2_weight, bias,
                torch.arange(experts_n)) / _C
    return gate[:, :width], up[:, :width], down


def loaded_expert_products(layer, p: torch.Tensor, q: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """(gate p, up p, down q) per expert from the weights as loaded ([E, 2Ipad, H] gate rows
    then up rows, [E, H, Ipad]): right where the kernel computes with them unchanged."""
    w13, w2 = layer.w13_weight.detach().float(), layer.w2_weight.detach().float()
    padded, width = w13.shape[1] // 2, q.numel()
    gate_up = w13 @ p.float()
    return gate_up[:, :width], gate_up[:, padded:padded + width], w2[:, :, :width] @ q.float()
