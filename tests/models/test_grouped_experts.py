"""GroupedExperts (models/grouped_experts.py): a MoE layer's experts in two grouped GEMMs give
the logits and gradients of Megatron's experts one by one, at TP1, TP2 with sequence
parallelism and EP2, on the same parameters; which one runs is the device's answer (can it,
and is it that device kind's default) unless the recipe says, and asking for grouped where it
cannot run stops the build naming the key."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from mindrl import device
from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.models import grouped_experts

from support.grouped_experts_worker import grads_by_experts
from support.hf_reference import reference_hf_model

pytestmark = pytest.mark.slow   # see tests/conftest.py


@dataclasses.dataclass
class _Config:          # the TransformerConfig fields grouped_experts reads
    params_dtype: torch.dtype = torch.float32
    gated_linear_unit: bool = True
    activation_func: object = F.silu
    add_bias_linear: bool = False
    use_te_activation_func: bool = False
    activation_func_clamp_value: object = None
    glu_linear_offset: float = 0.0
    moe_apply_probs_on_input: bool = False
    fp8: object = None
    fp4: object = None


def test_grouped_equals_sequential_at_tp1_tp2_sp_and_ep2():
    if device.grouped_gemm(torch.float32) is None:
        pytest.skip("this torch has no grouped GEMM on this device (the choice is sequential)")
    spec = load_model_spec("tiny-qwen3-moe")
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    tokens = torch.randint(0, spec.vocab_size, (2, 12),
                           generator=torch.Generator().manual_seed(1))
    layouts = [(1, 1), (2, 1), (1, 2)]
    got = spawn_local(grads_by_experts, 2, spec, full_by_tp, tokens, layouts)[0]
    for tp, ep in layouts:
        (seq_logits, seq_grads, seq_cls), (grp_logits, grp_grads, grp_cls) = (
            got[(tp, ep, False)], got[(tp, ep, True)])
        assert (seq_cls, grp_cls) == ("SequentialMLP", "GroupedExperts")
        assert sorted(seq_grads) == sorted(grp_grads)
        assert any(".experts." in n for n in grp_grads)
        logit_gap = (seq_logits - grp_logits).abs().max().item()
        grad_gap = max((seq_grads[n] - grp_grads[n]).abs().max().item() for n in seq_grads)
        print("tp", tp, "ep", ep, "logits", logit_gap, "grads", grad_gap)
        assert logit_gap <= 1e-6 and grad_gap <= 1e-6, (tp, ep)


def test_the_choice_asks_the_device_and_refuses_an_impossible_true(monkeypatch):
    config = _Config()
    monkeypatch.setattr(device, "grouped_gemm", lambda dtype: None)
    assert grouped_experts.choose(config, None) is False       # no grouped GEMM here
    assert grouped_experts.choose(config, False) is False
    with pytest.raises(ValueError, match="moe_grouped_gemm.*no grouped GEMM"):
        grouped_experts.choose(config, True)
    monkeypatch.setattr(device, "grouped_gemm", lambda dtype: (lambda *a: None))
    monkeypatch.setattr(device, "grouped_gemm_by_default", lambda: True)     # CUDA's
    assert grouped_experts.choose(config, None) is True
    assert grouped_experts.choose(config, False) is False      # the recipe turns it off
    monkeypatch.setattr(device, "grouped_gemm_by_default", lambda: False)    # CPU's
    assert grouped_experts.choose(config, None) is False
    assert grouped_experts.choose(config, True) is True        # asked for: runs where it can
    biased = dataclasses.replace(config, add_bias_linear=True)
    assert grouped_experts.choose(biased, None) is False       # not the SwiGLU it reproduces
    with pytest.raises(ValueError, match="MLP settings"):
        grouped_experts.choose(biased, True)
