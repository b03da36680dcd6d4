"""agent_config is refused before anything starts, naming the key and what exists."""

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.errors import ConfigError

CPU = ClusterResources("cpu", 2)


def _problems(*overrides):
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_cpu", list(overrides), cluster=CPU)
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
