"""A reference colocated with the actor at the actor's layout lives in the actor's processes
(config/placement.host_of): the plan says so, and the placement gives it no rank of its own."""

import pytest

from mindrl.config import format_plan, load_recipe, local_cluster, make_plan
from mindrl.config.placement import host_of, place_roles
from mindrl.config.scale_down import with_cpu_slots

COLOCATED = ["rl_config.colocate_actor_ref=true"]   # as the tiny recipes set it


def test_a_colocated_reference_at_the_actor_s_layout_is_hosted(cpu2):
    run = load_recipe("grpo_tiny_cpu", cluster=cpu2)       # the tiny recipes colocate them
    assert host_of(run, "ref") == "actor" and host_of(run, "actor") is None
    ref = next(p for p in place_roles(run) if p.role == "ref")
    assert ref.devices == (0,) and ref.host == "actor"
    plan = make_plan(run, cpu2)
    assert plan["roles"]["ref"]["host"] == "actor" and plan["roles"]["actor"]["host"] is None
    assert "shared with actor, inside the actor's processes" in format_plan(plan)


@pytest.mark.parametrize("overrides", [
    ["rl_config.colocate_actor_ref=false"],                    # not colocated: devices apart
    COLOCATED + ["+rl_config.ref_in_actor_process=false"],      # asked for processes apart
    COLOCATED + ["+ref_config.tensor_model_parallel_size=2",   # another layout
                 "rl_config.reference_resource.num_cpus=2"],
])
def test_a_reference_apart_or_at_another_layout_keeps_processes_of_its_own(cpu8, overrides):
    run = load_recipe("grpo_tiny_cpu", overrides, cluster=cpu8)
    assert host_of(run, "ref") is None
    assert "inside the actor's processes" not in format_plan(make_plan(run, cpu8))


def test_the_16_device_recipes_host_their_reference():
    for recipe in ("r1_zero_qwen25_7b", "grpo_qwen25_7b"):
        mini = load_recipe(recipe, ["+scale_down=2"])
        mini = load_recipe(recipe, ["+scale_down=2"], cluster=with_cpu_slots(local_cluster(),
                                                                              mini))
        assert host_of(mini, "ref") == "actor", recipe
