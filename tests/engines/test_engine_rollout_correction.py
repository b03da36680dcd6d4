"""Rollout correction in the Megatron engine: with rl_config.rollout_is the policy loss and its
gradient equal the hand-computed IS-weighted GRPO loss on transformers' log-probs, and
rollout/is_weight_mean / is_capped_fraction equal the plain-torch values, at DP2 and PP2."""

import pytest
import torch

from mindrl.algorithms import ppo_clip_loss
from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local
from mindrl.engines.megatron_engine import LossConfig

from support.engine_worker import full_gradients
from support.rollout_is_worker import update_metrics
from test_megatron_engine import hf_token_stats, tiny_engine_setup

pytestmark = pytest.mark.slow   # see tests/conftest.py

CAP = 2.0


def hand_weights(batch, mode):
    """min(exp(old - rollout), cap) per token, or of the sequence's summed log-ratio; 0 at
    padding. Also the quantities the metrics average (token or sequence weights) and how
    many of them exceed the cap before truncation."""
    mask = batch["response_mask"].bool()
    delta = (batch["old_log_probs"] - batch["rollout_log_probs"]).double() * mask
    if mode == "token":
        raw = delta.exp()
        weights = raw.clamp(max=CAP) * mask
        return weights.float(), weights[mask], raw[mask] > CAP
    raw = delta.sum(-1).exp()
    weights = raw.clamp(max=CAP)[:, None] * mask
    return weights.float(), raw.clamp(max=CAP), raw > CAP


@pytest.fixture(scope="module")
def setup():
    spec, hf, full_by_tp, batch = tiny_engine_setup()
    g = torch.Generator().manual_seed(5)
    # vLLM's log-probs: the old ones shifted by up to +-1.2 (ratios 0.3 .. 3.3, some capped)
    shift = (torch.rand(batch["old_log_probs"].shape, generator=g) * 2.4 - 1.2)
    batch["rollout_log_probs"] = batch["old_log_probs"] - shift * batch["response_mask"]
    return spec, hf, full_by_tp, batch


def test_weighted_loss_and_metrics_equal_hand_computed(setup):
    spec, hf, full_by_tp, batch = setup
    cfg = LossConfig(clip_ratio=0.2, rollout_is_cap=CAP)
    modes = ("off", "token", "sequence")
    results = spawn_local(update_metrics,
                          2, spec, full_by_tp, batch, [(1, 1), (1, 2)], cfg, modes)[0]
    with torch.no_grad():
        logp, _ = hf_token_stats(hf, batch, 1.0)
    mask = batch["response_mask"].float()
    for mode in modes:
        weights, averaged, capped = (hand_weights(batch, mode) if mode != "off"
                                     else (None, None, None))
        expected, _ = ppo_clip_loss(logp, batch["old_log_probs"], batch["advantages"], mask,
                                    clip_ratio=0.2, is_weights=weights)
        for tp, pp in ((1, 1), (1, 2)):
            got = results[(tp, pp, mode)]
            print(mode, f"DP{2 // pp} PP{pp}", {k: round(v, 6) for k, v in got.items()
                                                 if k.startswith(("actor/pg", "rollout/is"))})
            assert got["actor/pg_loss"] == pytest.approx(expected.item(), abs=1e-5), (mode, pp)
            if mode == "off":
                assert not any(k.startswith("rollout/is_") for k in got)
                continue
            assert got["rollout/is_weight_mean"] == pytest.approx(averaged.mean().item(),
                                                                  abs=1e-5)
            assert got["rollout/is_capped_fraction"] == pytest.approx(
                capped.double().mean().item(), abs=1e-9)
            assert 0 < got["rollout/is_capped_fraction"] < 1
    # the weights change the loss: token mode differs from no correction
    assert abs(results[(1, 1, "token")]["actor/pg_loss"]
               - results[(1, 1, "off")]["actor/pg_loss"]) > 1e-3


def test_weighted_gradient_equals_hand_computed_at_tp2(setup):
    spec, hf, full_by_tp, batch = setup
    cfg = LossConfig(clip_ratio=0.2, rollout_is="token", rollout_is_cap=CAP)
    hf.zero_grad()
    logp, _ = hf_token_stats(hf, batch, 1.0)
    weights, _, _ = hand_weights(batch, "token")
    loss, _ = ppo_clip_loss(logp, batch["old_log_probs"], batch["advantages"],
                            batch["response_mask"].float(), clip_ratio=0.2, is_weights=weights)
    loss.backward()
    expected = {n: p.grad for n, p in hf.named_parameters()}
    grads = spawn_local(full_gradients, 2, spec, full_by_tp, batch, 2, 1, cfg)[0]
    for rule, layer in mapping.iter_rules(spec):
        for name, g in mapping.mcore_to_hf(rule, grads[rule.mcore_name(layer)], spec,
                                           layer).items():
            rel = (g - expected[name]).norm() / expected[name].norm().clamp(min=1e-12)
            assert rel <= 1e-5, f"{name}: relative error {rel:.2e}"
