"""Qwen3-MoE (Megatron's MoELayer: router, top-k, SequentialMLP experts, allgather dispatch at
expert parallelism 1) in the Megatron engine equals transformers' Qwen3MoeForCausalLM:
response log-probs at TP1, TP2 with sequence parallelism, PP2 and packed micro batches under a
token budget; a model with a dense layer and without top-k renormalisation (router pre-softmax)
over PP2; the GRPO objective's gradients (router and every expert included) at TP2+SP and PP2;
and packed micro batches give the unpacked gradients."""

import dataclasses

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.engines.megatron_engine import LossConfig

from support.engine_batch import make_batch
from support.engine_worker import full_gradients, gradients_under_plans, log_probs_at_layouts
from support.hf_grpo import hf_grpo_gradients, hf_token_stats
from support.hf_reference import reference_hf_model

pytestmark = pytest.mark.slow   # see tests/conftest.py

GRPO = LossConfig(clip_ratio=0.2, use_kl_loss=True, kl_coef=0.1, kl_penalty="low_var_kl",
                  entropy_coeff=0.01, temperature=1.0)


def _setup(spec):
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    return hf, full_by_tp


@pytest.fixture(scope="module")
def setup():
    spec = load_model_spec("tiny-qwen3-moe")
    return (spec, *_setup(spec), make_batch(spec.vocab_size))


def _assert_log_probs(spec, hf, full_by_tp, batch, layouts, label):
    results = spawn_local(log_probs_at_layouts, 2, spec, full_by_tp, batch, layouts, 1.0)[0]
    with torch.no_grad():
        ref_logp, ref_ent = hf_token_stats(hf, batch, 1.0)
    for layout in layouts:
        # Packed rows hold real tokens only: past a response's end there is nothing to score.
        packed = len(layout) > 3 and layout[3]
        keep = batch["response_mask"].bool() if packed else torch.ones_like(ref_logp).bool()
        diff = (results[layout]["log_probs"] - ref_logp)[keep].abs().max().item()
        print(label, layout, "max |log-prob - transformers| =", diff)
        assert diff <= 1e-5, layout
        assert (results[layout]["entropy"] - ref_ent)[keep].abs().max() <= 1e-5, layout


def test_log_probs_match_transformers_at_tp1_tp2_sp_pp2_and_packed(setup):
    spec, hf, full_by_tp, batch = setup
    layouts = [(1, 1), (2, 1, True, False, None), (1, 2), (1, 1, False, True, 11)]
    _assert_log_probs(spec, hf, full_by_tp, batch, layouts, "qwen3_moe")


def test_a_dense_layer_and_unnormalised_top_k_match_over_pp2():
    base = load_model_spec("tiny-qwen3-moe")
    spec = dataclasses.replace(base, moe=dataclasses.replace(
        base.moe, norm_topk_prob=False, dense_layers=(1,)))
    hf, full_by_tp = _setup(spec)
    assert type(hf.model.layers[1].mlp).__name__ == "Qwen3MoeMLP"
    # Stage 0 holds the MoE layer, stage 1 the dense one.
    _assert_log_probs(spec, hf, full_by_tp, make_batch(spec.vocab_size), [(1, 2)],
                      "qwen3_moe dense layer 1, norm_topk_prob false")


def _as_hf(spec, grads):
    out = {}
    for rule, layer in mapping.iter_rules(spec):
        out.update(mapping.mcore_to_hf(rule, grads[rule.mcore_name(layer)], spec, layer))
    return out


def test_grpo_gradients_match_transformers_at_tp2_sp_and_pp2(setup):
    spec, hf, full_by_tp, batch = setup
    expected = mapping.unstack_hf(hf_grpo_gradients(hf, batch, GRPO), spec)
    for tp, pp, sp in [(2, 1, True), (1, 2, False)]:
        grads = spawn_local(full_gradients, 2, spec, full_by_tp, batch, tp, pp, GRPO, None, sp)[0]
        worst, names = 0.0, set()
        for name, g in _as_hf(spec, grads).items():
            ref = expected[name]
            rel = ((g - ref).norm() / ref.norm().clamp(min=1e-12)).item()
            worst, names = max(worst, rel), names | {name}
            assert rel <= 1e-5, f"TP{tp} PP{pp} SP{sp} {name}: relative error {rel:.2e}"
        assert {"model.layers.1.mlp.gate.weight", "model.layers.0.mlp.experts.7.up_proj.weight",
                "model.layers.1.mlp.experts.0.down_proj.weight"} <= names
        assert names == set(expected)
        print(f"qwen3_moe TP{tp} PP{pp} SP{sp}: max relative gradient error {worst:.2e}")


def test_packed_micro_batches_under_a_token_budget_give_the_unpacked_gradients(setup):
    spec, _, full_by_tp, batch = setup
    plans = [(1, False, 2, None), (1, True, 2, 11)]
    out = spawn_local(gradients_under_plans, 1, spec, full_by_tp, batch, [GRPO], plans)[0]
    rows, packed = (out[(GRPO.loss_agg_mode, p)] for p in plans)
    assert rows.keys() == packed.keys()
    # Relative to the tensor's norm: packing reorders fp32 sums, and elementwise bounds on
    # near-zero entries failed on an AVX-512 Xeon (1 ulp off at 1.6e-5). A wrong mask, offset
    # or weighting moves a gradient by far more than 1e-5 of its norm.
    for name, g in rows.items():
        rel = ((packed[name] - g).norm() / g.norm().clamp(min=1e-12)).item()
        assert rel <= 1e-5, f"{name}: relative error {rel:.2e}"
