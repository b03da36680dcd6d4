"""Multi-turn episodes with tools (agent_config) are set up so they can run: the format and the
tools resolve, the turn and token budgets fit inside the episode's. Part of validate.py's
checks (one job: agent_config)."""

from __future__ import annotations

import importlib

from mindrl.config import names
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
    if agent.tools and run.rl_config.router_replay == "r3":
        out.append(Problem("agent_config.tools", "runs multi-turn episodes, whose MoE routes "
                           "are not joined across turns, so routing replay r3 cannot replay "
                           "them", "set rl_config.router_replay to r2 or off, or leave "
                           "agent_config.tools empty", list(agent.tools)))
    if agent.tools and run.model.vision is not None:
        out.append(Problem("agent_config.tools", "runs multi-turn episodes, which take text "
                           "prompts only (a continued call of an image prompt is not checked "
                           "token for token)", "leave agent_config.tools empty for a "
                           "vision-language model", list(agent.tools)))
    if agent.call_bonus < 0:
        out.append(Problem("agent_config.call_bonus", "must be >= 0 (a penalty for calling "
                           "would teach the model not to use its tools)",
                           "set agent_config.call_bonus to 0 or more", agent.call_bonus))
    if agent.tool_workers < 1:
        out.append(Problem("agent_config.tool_workers", "must be at least 1",
                           "set agent_config.tool_workers >= 1", agent.tool_workers))
    return out
