"""agent_config is refused before anything starts, naming the key and what exists: tools,
formats, budgets, and an environment (rollout/environment.py) that cannot be loaded, is mixed
with tools or has nothing to score."""

from pathlib import Path

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.errors import ConfigError
from mindrl.config.plan import format_plan, make_plan
from support.recipe_errors import problem_of, recipe_error

CPU = ClusterResources("cpu", 2)


def _problems(*overrides):
    return _recipe_problems("grpo_tiny_cpu", *overrides)


def _recipe_problems(recipe, *overrides):
    with pytest.raises(ConfigError) as e:
        load_recipe(recipe, list(overrides), cluster=CPU)
    return {p.key: p for p in e.value.problems}


def test_the_defaults_run_single_turn():
    run = load_recipe("grpo_tiny_cpu", [], cluster=CPU)
    assert run.agent_config.tools == [] and not run.agent_config.multi_turn


def test_bad_agent_keys_are_refused_with_what_exists():
    found = _problems("+agent_config.format=hermes", "+agent_config.max_turns=0",
                      "+agent_config.tools=[calculater,nomodule:fn]",
                      "+agent_config.max_tool_response_tokens=9")
    assert "qwen25" in found["agent_config.format"].fix
    assert "max_turns >= 1" in found["agent_config.max_turns"].fix
    assert "calculator" in found["agent_config.tools[0]"].fix
    assert "ModuleNotFoundError" in found["agent_config.tools[1]"].message
    # the tiny recipe's episode is 3 tokens: a 9-token tool answer cannot fit
    assert "budget of 3" in found["agent_config.max_tool_response_tokens"].message


RETRY = str(Path(__file__).parents[2] / "examples" / "environments" / "retry.py")
ENV_RUN = ("agent_config.tools=[]", "agent_config.call_bonus=0")


def test_an_environment_runs_multi_turn_scored_as_the_recipe_says():
    run = load_recipe("grpo_tiny_agent_cpu", [*ENV_RUN, f"agent_config.environment={RETRY}:Retry",
                                              "agent_config.reward=environment",
                                              "rl_config.rule_reward=false"], cluster=CPU)
    assert run.agent_config.multi_turn and run.agent_config.tools == []
    # nothing refuses a run the environment alone scores
    assert not run.rl_config.rule_reward and not run.rl_config.reward_model
    plan = make_plan(run, CPU)
    assert plan["objective"]["score_terms"] == [f"the environment's reward ({RETRY}:Retry)"]
    text = format_plan(plan)
    assert f"environment {RETRY}:Retry in format char; at most 2 model turns" in text
    assert "scored by agent_config.reward: environment" in text


@pytest.mark.parametrize("spec, key, said", [
    ("nomodule:Env", "agent_config.environment", "module 'nomodule' cannot be imported: "
                                                 "ModuleNotFoundError"),
    (f"{RETRY}:Nope", "agent_config.environment", f"file {RETRY!r} has no 'Nope'; its classes "
                                                  "with reset and step: Retry"),
    ("json:dumps", "agent_config.environment", "'dumps' in module 'json' is a function, not a "
                                              "class"),
    ("json:JSONDecoder", "agent_config.environment", "class 'JSONDecoder' in module 'json' has "
                                                     "no reset or step"),
    ("/no/such/env.py:Env", "agent_config.environment", "file '/no/such/env.py' cannot be "
                                                        "loaded: FileNotFoundError"),
    ("Retry", "agent_config.environment", "is not module:Class"),
])
def test_an_environment_that_cannot_be_loaded_is_refused_saying_what_exists(spec, key, said):
    found = _recipe_problems("grpo_tiny_agent_cpu", *ENV_RUN,
                             f"agent_config.environment={spec}")
    assert said in found[key].message
    assert "reset(sample) and step(turn_text)" in found[key].fix


def test_an_environment_with_tools_a_call_bonus_or_the_wrong_reward_is_refused():
    found = _recipe_problems("grpo_tiny_agent_cpu", f"agent_config.environment={RETRY}:Retry",
                             "agent_config.reward=sum", "rl_config.rule_reward=false")
    assert "the tool loop is its own environment" in found["agent_config.environment"].message
    assert "pick one" in found["agent_config.environment"].fix
    assert "rule_reward is false" in found["agent_config.reward"].message
    assert "rl_config.reward_model" not in found       # the environment scores
    bonus = _recipe_problems("grpo_tiny_agent_cpu", "agent_config.tools=[]",
                             f"agent_config.environment={RETRY}:Retry")
    assert "has no tools" in bonus["agent_config.call_bonus"].message
    unset = _problems("+agent_config.reward=environment")
    assert "agent_config.environment is not set" in unset["agent_config.reward"].message
    overlong = _recipe_problems("grpo_tiny_agent_cpu", *ENV_RUN,
                                f"agent_config.environment={RETRY}:Retry",
                                "agent_config.reward=environment",
                                "+rl_config.overlong_buffer_len=4")
    assert "leaves out of the score" in overlong["rl_config.overlong_buffer_len"].message


def test_verifiers_alone_cannot_score_without_verifiers():
    found = _recipe_problems("grpo_tiny_agent_cpu", *ENV_RUN,
                             f"agent_config.environment={RETRY}:Retry",
                             "rl_config.rule_reward=false")
    assert "agent_config.reward: environment" in found["rl_config.reward_model"].fix


def test_a_warm_start_is_for_a_tiny_character_model_only():
    def problem(recipe, *overrides):
        return problem_of(recipe_error(recipe, list(overrides), CPU), "prepare.warm_start")

    assert "char_tools" in problem("grpo_tiny_cpu", "+prepare.warm_start=echo").fix
    assert "char or char_tools" in problem("grpo_tiny_cpu", "+prepare.warm_start=recall",
                                           "prepare.tokenizer=qwen25").fix
    assert "prepare.tiny_model" in problem("grpo_tiny_agent_cpu", "+prepare.warm_start=echo",
                                           "prepare.tiny_model=null").message
    steps = problem_of(recipe_error("grpo_tiny_agent_cpu", ["+prepare.warm_start=echo",
                                                            "+prepare.warm_start_steps=0"],
                                    CPU), "prepare.warm_start_steps")
    assert "at least 1" in steps.message
    run = load_recipe("grpo_tiny_agent_cpu", ["+prepare.warm_start=echo"], cluster=CPU)
    assert (run.prepare.warm_start, run.prepare.warm_start_steps) == ("echo", 1000)
