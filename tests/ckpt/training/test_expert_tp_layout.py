"""A checkpoint's layout records expert TP where it is not the TP, and a resume at another
expert TP is a layout change named in the load's notes (pure functions, no processes; the
load itself: tests/engines/test_megatron_engine_etp.py)."""

import pytest

from mindrl.ckpt.training.checkpoint_recipe import describe_layout, layout, run_recipe
from mindrl.ckpt.training.layout_change import plan_load
from mindrl.config import ClusterResources, load_recipe

WHOLE = layout(4, 1, 1, 2, 1)          # TP4, whole experts over EP 2
SPLIT = layout(4, 1, 1, 2, 2)          # TP4, experts split over 2 of the TP ranks


def test_the_record_and_its_text_name_expert_tp_only_where_it_is_not_the_tp():
    assert WHOLE == {"tp": 4, "pp": 1, "dp": 1, "ep": 2, "etp": 1}
    assert layout(4, 1, 1, 2, 4) == layout(4, 1, 1, 2) == {"tp": 4, "pp": 1, "dp": 1, "ep": 2}
    assert describe_layout(WHOLE) == "TP4 PP1 EP2 ETP1 DP1"


def test_another_expert_tp_at_the_same_tp_and_ep_is_a_layout_change_named_in_the_notes():
    plan = plan_load(SPLIT, "fully_reshardable", WHOLE, True, True, "run/iter_0000002")
    assert not plan.load_rng and not plan.rename_optimizer_keys   # same EP: same chain
    (note,) = plan.notes
    assert "saved at TP4 PP1 EP2 ETP2 DP1, loading at TP4 PP1 EP2 ETP1 DP1" in note
    # a record without expert TP is at expert TP = TP: equal to one that spells it out
    same = plan_load(layout(4, 1, 1, 2), "fully_reshardable", dict(WHOLE, etp=4), True, True,
                     "c")
    assert same.load_rng and not same.notes


def test_an_old_dp_reshardable_optimizer_at_another_expert_tp_is_refused_up_front():
    with pytest.raises(ValueError) as err:
        plan_load(SPLIT, "dp_reshardable", WHOLE, True, True, "c")
    for text in ("saved at TP4 PP1 EP2 ETP2 DP1", "expert_tensor_parallel_size=2",
                 "no_load_optim: true"):
        assert text in str(err.value)


def test_the_trainers_recipe_records_the_configured_expert_tp():
    ops = ["megatron_training.tensor_model_parallel_size=2",
           "megatron_training.sequence_parallel=true",
           "megatron_training.moe_token_dispatcher_type=alltoall",
           "megatron_training.expert_model_parallel_size=2",
           "+megatron_training.expert_tensor_parallel_size=1",
           "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2"]
    run = load_recipe("grpo_tiny_moe_cpu", ops, cluster=ClusterResources("cpu", 2),
                      check_paths=False)
    assert run_recipe(run)["layout"] == {"tp": 2, "pp": 1, "dp": 1, "ep": 2, "etp": 1}
