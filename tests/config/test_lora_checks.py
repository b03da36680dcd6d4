"""actor_config.lora: the tiny LoRA recipe's actor carries its adapters and its reference is
the actor's base in the actor's processes; bad input is refused before anything starts, naming
the key and a fix."""

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.placement import host_of
from mindrl.config.roles import role_setup
from support.recipe_errors import problem_of, recipe_error

RECIPE = "grpo_tiny_lora_cpu"
CPU = ClusterResources("cpu", 2)


def refused(*overrides, cluster=CPU):
    return recipe_error(RECIPE, list(overrides), cluster)


def test_the_tiny_recipe_trains_adapters_over_a_reference_that_is_its_base():
    run = load_recipe(RECIPE, [], cluster=CPU)
    lora = run.actor_config.lora
    assert (lora.rank, lora.alpha, lora.sync) == (16, 32.0, "merged")
    assert lora.target_modules == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert run.ref_config.lora is None and host_of(run, "ref") == "actor"
    actor, ref = role_setup(run, "actor", pad_id=0), role_setup(run, "ref", pad_id=0)
    assert actor.lora == lora and actor.adapters_off_of is None
    assert ref.lora is None and ref.adapters_off_of == "actor"
    assert actor.optim.lr == 3e-3


def test_off_by_default():
    run = load_recipe("grpo_tiny_max_cpu", [], cluster=CPU)
    assert run.actor_config.lora is None
    assert role_setup(run, "ref", pad_id=0).adapters_off_of is None


@pytest.mark.parametrize("override, key, words", [
    ("actor_config.lora.rank=0", "actor_config.lora.rank", "at least 1"),
    ("actor_config.lora.alpha=0", "actor_config.lora.alpha", "above 0"),
    ("actor_config.lora.dropout=1.0", "actor_config.lora.dropout", "[0, 1)"),
    ("actor_config.lora.target_modules=[]", "actor_config.lora.target_modules", "empty"),
    ("actor_config.lora.target_modules=[linear_qv]", "actor_config.lora.target_modules",
     "did you mean 'linear_qkv'"),
    ("actor_config.lora.target_modules=[router]", "actor_config.lora.target_modules",
     "router is never adapted"),
    ("actor_config.lora.target_modules=[experts]", "actor_config.lora.target_modules",
     "not built yet"),
    ("actor_config.lora.sync=adapter", "actor_config.lora.sync", "lora.sync: merged"),
    ("+ref_config.lora.rank=4", "ref_config.lora", "only the actor trains"),
    ("+ref_config.load=/elsewhere", "ref_config.load", "adapters off"),
])
def test_bad_lora_input_is_refused_naming_the_key(override, key, words):
    problem = problem_of(refused(override), key)
    assert words in f"{problem.message} {problem.fix}", problem


def test_lora_on_the_shared_section_names_the_actors():
    err = recipe_error("grpo_tiny_max_cpu", ["+megatron_training.lora.rank=8"], CPU)
    problem = problem_of(err, "megatron_training.lora")
    assert "actor_config.lora" in problem.fix
    assert len([p for p in err.problems if p.key.endswith(".lora")]) == 1


def test_a_reference_outside_the_actors_processes_is_refused():
    err = refused("rl_config.colocate_actor_ref=false",
                  "+rl_config.reference_resource.num_cpus=1",
                  cluster=ClusterResources("cpu", 3))
    assert "actor's processes" in problem_of(err, "rl_config.colocate_actor_ref").message


def test_half_precision_and_vision_actors_are_refused():
    err = refused("megatron_training.bf16=true")
    assert "half-precision" in problem_of(err, "actor_config.lora").message
    err = recipe_error("grpo_tiny_vl_cpu", ["+actor_config.lora.rank=8"], CPU)
    assert "vision-language" in problem_of(err, "actor_config.lora").message
