"""Multi-turn episodes (agent_config) are set up so they can run: the format and the tools or
the environment resolve, the turn and token budgets fit inside the episode's, and something
scores it. Part of validate.py's checks (one job: agent_config)."""

from __future__ import annotations

import importlib

from mindrl.config import names
from mindrl.config.environment_class import load_environment
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig
from mindrl.config.structure import suggest


def _user_tool(spec: str):
    """A `module:function` tool, imported; ValueError saying why not."""
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None
    if not callable(fn):
        raise ValueError(f"{spec} is a {type(fn).__name__}, not a function")
    return fn


def check_agent(run: RunConfig) -> list[Problem]:
    agent, out = run.agent_config, []
    if agent.format not in names.TOOL_FORMATS:
        out.append(Problem("agent_config.format", "is not a known tool format",
                           suggest(agent.format, names.TOOL_FORMATS), agent.format))
    for i, tool in enumerate(agent.tools):
        if ":" in tool:
            try:
                _user_tool(tool)
            except ValueError as e:
                out.append(Problem(f"agent_config.tools[{i}]", f"cannot be loaded ({e})",
                                   "give module:function of a typed function importable "
                                   "here", tool))
        elif tool not in names.SHIPPED_TOOLS:
            out.append(Problem(f"agent_config.tools[{i}]", "is not a shipped tool",
                               suggest(tool, names.SHIPPED_TOOLS) + " (a tool of your own: "
                               "module:function)", tool))
    if agent.max_turns < 1:
        out.append(Problem("agent_config.max_turns", "must be at least 1 (one model turn: "
                           "no tool call is answered)", "set agent_config.max_turns >= 1",
                           agent.max_turns))
    if agent.tool_timeout_s <= 0:
        out.append(Problem("agent_config.tool_timeout_s", "must be > 0",
                           "set agent_config.tool_timeout_s to the seconds a call may take",
                           agent.tool_timeout_s))
    budget = run.generate_config.sampling_config.max_tokens
    if agent.tools and not 0 < agent.max_tool_response_tokens < budget:
        out.append(Problem("agent_config.max_tool_response_tokens",
                           f"must be between 1 and the episode's budget of {budget} tokens "
                           f"(generate_config.sampling_config.max_tokens counts model and "
                           f"tool tokens)", "lower it, or raise the episode's max_tokens",
                           agent.max_tool_response_tokens))
    key, value = (("agent_config.tools", list(agent.tools)) if agent.tools
                  else ("agent_config.environment", agent.environment))
    if agent.multi_turn and run.rl_config.router_replay == "r3":
        out.append(Problem(key, "runs multi-turn episodes, whose MoE routes are not joined "
                           "across turns, so routing replay r3 cannot replay them",
                           f"set rl_config.router_replay to r2 or off, or leave {key} empty",
                           value))
    if agent.multi_turn and run.model.vision is not None:
        out.append(Problem(key, "runs multi-turn episodes, which take text prompts only (a "
                           "continued call of an image prompt is not checked token for "
                           "token)", f"leave {key} empty for a vision-language model", value))
    out += _environment_problems(run)
    if agent.call_bonus < 0:
        out.append(Problem("agent_config.call_bonus", "must be >= 0 (a penalty for calling "
                           "would teach the model not to use its tools)",
                           "set agent_config.call_bonus to 0 or more", agent.call_bonus))
    if agent.tool_workers < 1:
        out.append(Problem("agent_config.tool_workers", "must be at least 1",
                           "set agent_config.tool_workers >= 1", agent.tool_workers))
    return out


def _environment_problems(run: RunConfig) -> list[Problem]:
    """An environment imports as a class with reset and step, is not mixed with tools or the
    call bonus, and the score agent_config.reward names has something to add."""
    agent, out = run.agent_config, []
    if agent.environment is None:
        if agent.reward != "verifiers":
            out.append(Problem("agent_config.reward", "scores with the environment's reward, "
                               "but agent_config.environment is not set",
                               "set agent_config.environment to module:Class, or "
                               "agent_config.reward: verifiers", agent.reward))
        return out
    try:
        load_environment(agent.environment)
    except ValueError as e:
        out.append(Problem("agent_config.environment", f"cannot be loaded ({e})",
                           "give module:Class (or path/to/file.py:Class) of a class with "
                           "reset(sample) and step(turn_text), importable here",
                           agent.environment))
    if agent.tools:
        out.append(Problem("agent_config.environment", "is set together with "
                           "agent_config.tools: the tool loop is its own environment",
                           "pick one: leave agent_config.tools empty, or unset "
                           "agent_config.environment", agent.environment))
    if agent.call_bonus and not agent.tools:
        out.append(Problem("agent_config.call_bonus", "rewards an answered tool call, and an "
                           "environment's episode has no tools", "set agent_config.call_bonus "
                           "to 0 (the environment's reward is its own)", agent.call_bonus))
    if agent.reward == "sum" and not run.rl_config.rule_reward:
        out.append(Problem("agent_config.reward", "adds the verifiers' score to the "
                           "environment's, but rl_config.rule_reward is false (no verifiers)",
                           "set agent_config.reward: environment, or rl_config.rule_reward: "
                           "true", agent.reward))
    if agent.reward == "environment" and run.rl_config.overlong_buffer_len:
        out.append(Problem("rl_config.overlong_buffer_len", "adds to the verifiers' score, "
                           "which agent_config.reward: environment leaves out of the score",
                           "set agent_config.reward: sum, or overlong_buffer_len: 0",
                           run.rl_config.overlong_buffer_len))
    return out
