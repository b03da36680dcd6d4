"""Qwen3 (q/k norms, head dim apart from hidden / heads) in the Megatron engine equals
transformers' Qwen3ForCausalLM: response log-probs at TP1, TP2 with sequence parallelism and
PP2, and the GRPO objective's gradients at TP2+SP and PP2 (the q/k norms' included, which
Megatron's finalize_model_grads sums over TP)."""

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.engines.megatron_engine import LossConfig

from support.engine_batch import make_batch
from support.engine_worker import full_gradients, log_probs_at_layouts
from support.hf_grpo import hf_grpo_gradients, hf_token_stats
from support.hf_reference import reference_hf_model

pytestmark = pytest.mark.slow   # see tests/conftest.py


@pytest.fixture(scope="module")
def setup():
    spec = load_model_spec("tiny-qwen3")
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    return spec, hf, full_by_tp, make_batch(spec.vocab_size)


def test_log_probs_match_transformers_at_tp1_tp2_sp_and_pp2(setup):
    spec, hf, full_by_tp, batch = setup
    layouts = [(1, 1), (2, 1, True, False, None), (1, 2)]
    results = spawn_local(log_probs_at_layouts, 2, spec, full_by_tp, batch, layouts, 1.0)[0]
    with torch.no_grad():
        ref_logp, ref_ent = hf_token_stats(hf, batch, 1.0)
    for layout in layouts:
        diff = (results[layout]["log_probs"] - ref_logp).abs().max().item()
        print("qwen3", layout, "max |log-prob - transformers| =", diff)
        assert diff <= 1e-5, layout
        assert (results[layout]["entropy"] - ref_ent).abs().max() <= 1e-5, layout


def test_grpo_gradients_match_transformers_at_tp2_sp_and_pp2(setup):
    spec, hf, full_by_tp, batch = setup
    cfg = LossConfig(clip_ratio=0.2, use_kl_loss=True, kl_coef=0.1, kl_penalty="low_var_kl",
                     entropy_coeff=0.01, temperature=1.0)
    expected = hf_grpo_gradients(hf, batch, cfg)
    for tp, pp, sp in [(2, 1, True), (1, 2, False)]:
        grads = spawn_local(full_gradients, 2, spec, full_by_tp, batch, tp, pp, cfg, None, sp)[0]
        worst, names = 0.0, set()
        for rule, layer in mapping.iter_rules(spec):
            for name, g in mapping.mcore_to_hf(rule, grads[rule.mcore_name(layer)], spec,
                                               layer).items():
                ref = expected[name]
                rel = ((g - ref).norm() / ref.norm().clamp(min=1e-12)).item()
                worst, names = max(worst, rel), names | {name}
                assert rel <= 1e-5, f"TP{tp} PP{pp} SP{sp} {name}: relative error {rel:.2e}"
        assert {"model.layers.1.self_attn.q_norm.weight",
                "model.layers.0.self_attn.k_norm.weight"} <= names
        print(f"qwen3 TP{tp} PP{pp} SP{sp}: max relative gradient error {worst:.2e}")
