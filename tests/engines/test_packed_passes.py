"""Packed rows and token-budget micro batches change speed, never the numbers: log-probs,
loss and gradients equal the padded path under any plan, and the first on-policy update
recomputes exactly the old log-probs."""

import dataclasses

import pytest
import torch

from mindrl.distributed import spawn_local
from mindrl.engines.megatron_engine import LossConfig

from engines.test_megatron_engine import tiny_engine_setup
from support.engine_worker import first_update_ratios, gradients_under_plans

pytestmark = pytest.mark.slow   # see tests/conftest.py

N = 8   # samples; response lengths 1..N


def lengths_batch(vocab, seed=3):
    """N samples with responses of 1..N tokens and prompts of 1..4 (left-padded)."""
    g = torch.Generator().manual_seed(seed)
    p, r = 4, N
    prompt_lengths = torch.tensor([1 + (i * 3) % 4 for i in range(N)])
    response_lengths = torch.arange(1, N + 1).flip(0)
    prompt_mask = (torch.arange(p) >= p - prompt_lengths[:, None]).long()
    response_mask = (torch.arange(r) < response_lengths[:, None]).long()
    return {"prompt_ids": torch.randint(1, vocab, (N, p), generator=g) * prompt_mask,
            "prompt_mask": prompt_mask,
            "response_ids": torch.randint(1, vocab, (N, r), generator=g) * response_mask,
            "response_mask": response_mask,
            "advantages": torch.randn(N, 1, generator=g).expand(N, r) * response_mask,
            "old_log_probs": -torch.rand(N, r, generator=g) * 3,
            "ref_log_probs": -torch.rand(N, r, generator=g) * 3}


@pytest.fixture(scope="module")
def setup():
    spec, _, full_by_tp, _ = tiny_engine_setup()
    return spec, full_by_tp, lengths_batch(spec.vocab_size)


def _relative(a, b):
    return ((a - b).norm() / b.norm().clamp(min=1e-12)).item()


def test_gradients_do_not_depend_on_the_plan_for_any_loss_aggregation(setup):
    spec, full_by_tp, batch = setup
    base = LossConfig(clip_ratio=0.2, use_kl_loss=True, kl_coef=0.1, kl_penalty="low_var_kl",
                      entropy_coeff=0.01)
    cfgs = [dataclasses.replace(base, loss_agg_mode=m)
            for m in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")]
    reference = (2, False, N, None)   # TP2 (DP1): the whole mini batch in one padded row set
    plans = [reference, (2, False, 1, None), (2, True, 4, None), (2, True, 1, None),
             (2, True, 1, 16), (1, False, 2, None), (1, True, 4, None), (1, True, 1, 12)]
    plans = [(tp, packed, mbs if budget is None else 1, budget)
             for tp, packed, mbs, budget in plans]
    grads = spawn_local(gradients_under_plans, 2, spec, full_by_tp, batch, cfgs, plans)[0]
    for cfg in cfgs:
        ref = grads[(cfg.loss_agg_mode, reference)]
        for plan in plans[1:]:
            got = grads[(cfg.loss_agg_mode, plan)]
            worst = max(_relative(got[n], ref[n]) for n in ref)
            assert worst <= 1e-6, f"{cfg.loss_agg_mode} plan {plan}: relative {worst:.2e}"
    # The modes weigh the samples differently: a plan that ignored the mode would pass above.
    modes = [grads[(c.loss_agg_mode, reference)] for c in cfgs]
    name = next(iter(modes[0]))
    assert _relative(modes[1][name], modes[0][name]) > 1e-3


def test_first_update_recomputes_the_old_log_probs_exactly(setup):
    spec, full_by_tp, batch = setup
    from mindrl.data.rows import mini_batches

    ratios = spawn_local(first_update_ratios, 2, spec, full_by_tp, batch, 4, 12)[0]
    first = mini_batches(N, 4, True, 7)[0]          # the worker's shuffled layout
    assert ratios.numel() == int(batch["response_mask"][first].sum())
    # Same micro batches, same kernels: 0.0 on CPU here; planning the pass over the whole
    # batch instead (other packs) gave 4.8e-7.
    assert (ratios - 1).abs().max().item() <= 1e-6
