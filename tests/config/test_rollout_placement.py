"""Rollout engines on the actor's devices (the default) or on devices of their own
(generate_config.rollout_devices): the device assignment, its validation before anything starts,
and what the plan says."""

import pytest

from mindrl.config import ClusterResources, ConfigError, format_plan, load_recipe, make_plan
from mindrl.config.placement import (devices_required, engine_devices, engines_colocated,
                                     rollout_data_parallel_size, rollout_devices)

COLOCATED_ROLES = ("rl_config.colocate_actor_ref=true",)
APART = "rl_config.colocate_actor_ref=false"     # the reference on a device of its own


def test_the_default_keeps_the_engines_on_the_actor_s_devices(cpu2):
    run = load_recipe("grpo_tiny_cpu", cluster=cpu2)
    assert run.generate_config.rollout_devices == 0 and engines_colocated(run)
    assert rollout_devices(run) == (0,) and engine_devices(run) == [(0,)]
    assert devices_required(run) == 1            # actor, ref (in its process) and vLLM on 0
    plan = make_plan(run, cpu2)
    assert plan["rollout"]["colocated"] and plan["memory_bytes"]["rollout_device"] is None
    assert "rollout devices 0 (on the actor's)" in format_plan(plan)


def test_separate_engines_take_the_devices_after_every_role_s(cpu8):
    run = load_recipe("grpo_tiny_cpu", [APART, "+actor_config.tensor_model_parallel_size=2",
                                        "rl_config.actor_resource.num_cpus=2",
                                        "+generate_config.rollout_devices=4",
                                        "generate_config.infer_tensor_parallel_size=2"],
                      cluster=cpu8)
    assert not engines_colocated(run)
    # actor 0-1, ref 2, engines 3-6: two TP2 engines
    assert rollout_devices(run) == (3, 4, 5, 6)
    assert engine_devices(run) == [(3, 4), (5, 6)]
    assert rollout_data_parallel_size(run) == 2
    assert devices_required(run) == 7
    plan = make_plan(run, cpu8)
    assert plan["devices_required"] == 7 and plan["fits_cluster"]
    assert plan["rollout"]["devices"] == [3, 4, 5, 6] and plan["rollout"]["instances"] == 2
    mem = plan["memory_bytes"]
    # The actor's devices hold no vLLM: its generation phase is its training phase.
    assert mem["actor_device_generation_phase"] == mem["actor_device_training_phase"]
    assert mem["rollout_device"] == mem["rollout"]["weights"] + mem["rollout"]["kv_cache"]
    text = format_plan(plan)
    assert "rollout devices 3-6 (their own: generate_config.rollout_devices)" in text, text
    assert "x 2 instance(s)" in text


def test_one_cpu_slot_of_their_own_fits_two_cpus_beside_colocated_roles(cpu2):
    run = load_recipe("grpo_tiny_cpu", [*COLOCATED_ROLES, "+generate_config.rollout_devices=1"],
                      cluster=cpu2)
    assert rollout_devices(run) == (1,) and engine_devices(run) == [(1,)]
    assert devices_required(run) == 2


def test_too_few_devices_is_an_error_naming_the_key_and_the_numbers(cpu2):
    with pytest.raises(ConfigError) as info:
        load_recipe("grpo_tiny_cpu", [APART, "+generate_config.rollout_devices=2"],
                    cluster=cpu2)
    text = str(info.value)
    assert info.value.keys == ["generate_config.rollout_devices"], text
    assert ("generate_config.rollout_devices=2: asks for 2 device(s) of the engines' own after "
            "the roles' 2: 4 devices, but the cluster has 2") in text, text
    assert "lower it to at most 0, set 0 to run the engines on the actor's devices" in text


def test_engine_devices_must_split_into_engines():
    with pytest.raises(ConfigError) as info:
        load_recipe("grpo_tiny_cpu", ["+generate_config.rollout_devices=3",
                                      "generate_config.infer_tensor_parallel_size=2",
                                      "+actor_config.tensor_model_parallel_size=2",
                                      "rl_config.actor_resource.num_cpus=2"],
                    cluster=ClusterResources("cpu", 8))
    assert "generate_config.rollout_devices=3: must be 0 (engines on the actor's devices) or a " \
           "positive multiple of infer TP x PP = 2" in str(info.value)
    with pytest.raises(ConfigError, match=r"generate_config.rollout_devices=-1: must be 0"):
        load_recipe("grpo_tiny_cpu", ["+generate_config.rollout_devices=-1"],
                    cluster=ClusterResources("cpu", 8))


def test_scale_down_divides_the_engines_devices(cpu2):
    """The 7B recipe's 16 devices on 2 nodes, plus 8 of the engines' own, in miniature at 1/4:
    the actor (and its reference) on 4 CPU slots, the engines on the 2 after them."""
    from mindrl.config.scale_down import with_cpu_slots

    run = load_recipe("r1_zero_qwen25_7b", ["+generate_config.rollout_devices=8",
                                            "+scale_down=4"], cluster=cpu2)
    assert run.generate_config.rollout_devices == 2
    assert rollout_devices(run) == (4, 5) and devices_required(run) == 6
    assert with_cpu_slots(cpu2, run).num_devices == 6
