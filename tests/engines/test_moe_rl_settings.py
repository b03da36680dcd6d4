"""A MoE role's RL settings reach the Megatron engine: a frozen router stays bit-identical
through a step while the experts change; the load-balancing loss is off by default and, when on,
changes the gradients and is logged; tokens-per-expert load is reported every step; the router
computes in the params dtype unless moe_router_dtype asks otherwise."""

import pytest
import torch

from mindrl.config.roles import MoETraining
from mindrl.distributed import spawn_local

from support.moe_rl_worker import one_step

pytestmark = pytest.mark.slow   # see tests/conftest.py


def _run(moe, world=1, **kw):
    return spawn_local(one_step, world, moe, *kw.values())[0]


def _changed(res, part):
    return [n for n in res["before"] if part in n
            and not torch.equal(res["before"][n], res["after"][n])]


def test_router_freeze_keeps_routers_bit_identical_while_experts_train():
    free = _run(MoETraining())
    frozen = _run(MoETraining(router_freeze=True))
    routers = [n for n in free["before"] if ".router." in n]
    assert len(routers) == 2                          # one per MoE layer of tiny-qwen3-moe
    assert sorted(_changed(free, ".router.")) == sorted(routers)   # a free router moves
    assert _changed(frozen, ".router.") == []                      # bit-identical
    assert not any(".router." in n for n in frozen["trainable"])
    experts = [n for n in frozen["before"] if ".experts." in n]
    assert len(_changed(frozen, ".experts.")) >= len(experts) // 2   # experts still train


def test_aux_loss_off_by_default_and_logged_when_on():
    off = _run(MoETraining())
    on = _run(MoETraining(aux_loss_coeff=0.5, load_balancing_type="aux_loss"))
    assert off["aux_coeff"] == 0.0 and on["aux_coeff"] == 0.5
    assert "actor/moe_aux_loss" not in off["metrics"]
    aux = on["metrics"]["actor/moe_aux_loss"]
    # Megatron's switch balancing loss: 1 when perfectly balanced, num_experts (8) when every
    # token goes to one expert.
    assert 0.9 < aux < 8.0
    # The loss enters the gradients: the routers end elsewhere than without it.
    for name in off["after"]:
        if ".router." in name:
            assert not torch.equal(off["after"][name], on["after"][name])


def test_tokens_per_expert_load_is_reported():
    res = _run(MoETraining())
    load = res["metrics"]["moe/tokens_per_expert_max_over_mean"]
    assert 1.0 <= load <= 8.0                      # 1 balanced, 8 = all on one of 8 experts


def test_router_dtype_follows_params_unless_set():
    assert MoETraining().transformer_config()["moe_router_dtype"] is None
    assert MoETraining(router_dtype="fp32").transformer_config()["moe_router_dtype"] == "fp32"
    assert "moe_grouped_gemm" not in MoETraining().transformer_config()   # the family's
    res = _run(MoETraining(router_dtype="fp32"))
    assert res["router_dtype"] == "fp32"


def test_routing_metrics_across_layouts():
    """The same weights and batch at TP1 in three partitions (packed micro batches of <= 11
    tokens, of <= 64, padded rows of 2), DP2, TP2+SP and PP2. The per-sample balancing loss
    (seq_aux_loss, the default) is the same number and gives the same gradients in every
    partition: the objective stays partition-invariant with it on. Megatron's aux_loss is one
    per micro batch, so another partition gives another value. The load counts summed over DP
    equal one rank's exactly; padding is routed too (Megatron's experts see every row
    position: the tail that makes a packed row a multiple of TP under sequence parallelism,
    PP's common micro-batch length), so there the load is that of the padded rows."""
    from mindrl.ckpt import mapping
    from mindrl.config.model_spec import load_model_spec

    from support.engine_batch import make_batch
    from support.hf_reference import reference_hf_model
    from support.moe_rl_worker import metrics_at_layouts

    spec = load_model_spec("tiny-qwen3-moe")
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    batch = make_batch(spec.vocab_size)
    per_sample, megatron = MoETraining(aux_loss_coeff=0.5), MoETraining(
        aux_loss_coeff=0.5, load_balancing_type="aux_loss")
    load, aux, norm = ("moe/tokens_per_expert_max_over_mean", "actor/moe_aux_loss",
                       "actor/grad_norm")
    one = spawn_local(metrics_at_layouts, 1, spec, full_by_tp, batch, 1, 1, [
        (per_sample, 11), (per_sample, 64), (per_sample, None), (MoETraining(), 11),
        (megatron, 11), (megatron, 64)])[0]
    base = one[0]
    got = {layout: spawn_local(metrics_at_layouts, 2, spec, full_by_tp, batch, *layout,
                               [(per_sample, 11)])[0][0]
           for layout in ((1, 1), (2, 1), (1, 2))}   # world 2: DP2, TP2+SP, PP2
    print({k: (v[load], v[aux], v[norm]) for k, v in got.items()},
          [(r.get(aux), r[norm]) for r in one])
    assert 0.9 < base[aux] < 8.0                  # 1 balanced, 8 = every token on one expert
    assert one[3][norm] != pytest.approx(base[norm], rel=1e-4)    # the loss is in the grads
    for other in [one[1], one[2], *got.values()]:
        assert other[aux] == pytest.approx(base[aux], rel=1e-6)
        assert other[norm] == pytest.approx(base[norm], rel=2e-5)
    assert one[4][aux] != pytest.approx(one[5][aux], rel=1e-3)      # Megatron's: per micro
    assert got[(1, 1)][load] == pytest.approx(base[load], rel=1e-6)
    for layout in ((2, 1), (1, 2)):
        assert got[layout][load] == pytest.approx(base[load], rel=0.1), layout
