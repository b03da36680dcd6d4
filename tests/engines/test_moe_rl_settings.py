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
    on = _run(MoETraining(aux_loss_coeff=0.5))
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
