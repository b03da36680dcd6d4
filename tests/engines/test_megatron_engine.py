"""Megatron engine vs an independent transformers computation of the same quantities."""

import dataclasses
import math

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local
from mindrl.engines.megatron_engine import LossConfig
from mindrl.config.model_spec import load_model_spec

from support.engine_batch import B, R, make_batch
from support.engine_worker import full_gradients, log_probs_at_layouts
from support.hf_grpo import hf_grpo_gradients, hf_token_stats
from support.hf_reference import reference_hf_model

pytestmark = pytest.mark.slow   # see tests/conftest.py

def tiny_engine_setup():
    """(spec, transformers model, full Megatron tensors at TP1 and TP2, a batch): the tiny
    model every engine test here compares against transformers."""
    spec = dataclasses.replace(load_model_spec("tiny-qwen2"), vocab_size=126,
                               make_vocab_size_divisible_by=4)
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    return spec, hf, full_by_tp, make_batch(spec.vocab_size)


@pytest.fixture(scope="module")
def setup():
    return tiny_engine_setup()


def test_log_probs_and_entropy_match_transformers_at_every_layout(setup):
    spec, hf, full_by_tp, batch = setup
    temperature = 0.7
    # (tp, pp[, sequence parallel, packed, token budget]); (1, 1) in a world of 2 is DP2.
    layouts = [(1, 1), (2, 1), (1, 2), (1, 1, False, True, 11), (2, 1, True, True, None),
               (1, 2, False, True, None)]
    results = spawn_local(log_probs_at_layouts, 2, spec, full_by_tp, batch, layouts, temperature)[0]
    with torch.no_grad():
        ref_logp, ref_ent = hf_token_stats(hf, batch, temperature)
    for layout in layouts:
        got = results[layout]
        # Packed rows hold real tokens only: past a response's end there is nothing to score.
        keep = (batch["response_mask"].bool() if len(layout) > 2
                else torch.ones(B, R, dtype=torch.bool))
        assert got["log_probs"].shape == (B, R)
        assert (got["log_probs"] - ref_logp)[keep].abs().max() <= 1e-5, layout
        assert (got["entropy"] - ref_ent)[keep].abs().max() <= 1e-5, layout
        assert (got["log_probs"] - results[(1, 1)]["log_probs"])[keep].abs().max() <= 1e-5


def test_update_gradient_equals_plain_torch_grpo_loss(setup):
    spec, hf, full_by_tp, batch = setup
    cfg = LossConfig(clip_ratio=0.2, use_kl_loss=True, kl_coef=0.1, kl_penalty="low_var_kl",
                     entropy_coeff=0.01, temperature=1.0)
    # Reference: the same GRPO objective on the HF model, one full-batch backward.
    expected = hf_grpo_gradients(hf, batch, cfg)

    # (1, 1) in a world of 2 = DP2; there the coefficient comes per call, as the trainer's
    # entropy schedule passes it, over a config that has none. TP2 with sequence parallel:
    # every norm (the final one included) sees half the sequence per rank and its gradient is
    # summed over TP by Megatron's finalize_model_grads.
    no_bonus = dataclasses.replace(cfg, entropy_coeff=0.0)
    by_layout = {}
    # Packed: TP2 with sequence parallel, and PP2 (packs padded to one shape).
    for tp, pp, sp, loss_cfg, coeff, packed in [
            (2, 1, False, cfg, None, False), (2, 1, True, cfg, None, False),
            (1, 2, False, cfg, None, False), (1, 1, False, no_bonus, cfg.entropy_coeff, False),
            (2, 1, True, cfg, None, True), (1, 2, False, cfg, None, True)]:
        grads = spawn_local(full_gradients, 2, spec, full_by_tp, batch, tp, pp, loss_cfg,
                            coeff, sp, packed)[0]
        by_layout[(tp, pp, sp, packed)] = grads
        for rule, layer in mapping.iter_rules(spec):
            hf_grads = mapping.mcore_to_hf(rule, grads[rule.mcore_name(layer)], spec, layer)
            for name, g in hf_grads.items():
                ref = expected[name]
                rel = (g - ref).norm() / ref.norm().clamp(min=1e-12)
                assert rel <= 1e-5, (f"TP{tp} PP{pp} SP{sp} packed {packed} {name}: relative "
                                     f"error {rel:.2e}")
    for name, g in by_layout[(2, 1, True, False)].items():   # SP against TP2 without it
        ref = by_layout[(2, 1, False, False)][name]
        rel = (g - ref).norm() / ref.norm().clamp(min=1e-12)
        assert rel <= 1e-5, f"TP2 SP vs TP2 {name}: relative error {rel:.2e}"


def _batches(vocab, n=3):
    return [make_batch(vocab, seed=10 + i) for i in range(n)]


def test_checkpoint_resume_is_exact(setup, tmp_path):
    from support.engine_worker import checkpoint_resume

    spec, _, full_by_tp, _ = setup
    # TP2 in a world of 2, distributed optimizer: model, Adam moments and RNG round-trip.
    res = spawn_local(checkpoint_resume, 2, spec, full_by_tp, _batches(spec.vocab_size), 2, 1,
                      str(tmp_path / "ckpt"))[0]
    assert res["params_equal"] and res["optim_equal"]
    assert res["helpers"] == []     # written in the saving process, no Manager spawned
    assert res["resumed"] == res["straight"]  # identical metrics, step for step
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert not list((tmp_path / "ckpt").glob(".tmp_*"))


def test_offload_onload_leaves_training_unchanged(setup):
    from support.engine_worker import offload_roundtrip

    spec, _, full_by_tp, _ = setup
    res = spawn_local(offload_roundtrip, 2, spec, full_by_tp, _batches(spec.vocab_size), 1, 2)[0]
    assert res["offloaded"] == res["straight"]
    # Entropy is reported without an entropy term (near ln V for a random init model).
    assert all(4.0 < m["actor/entropy"] <= math.log(spec.vocab_size) for m in res["straight"])
    assert all(res["emptied"]) and all(f > 0 for f in res["freed"])
