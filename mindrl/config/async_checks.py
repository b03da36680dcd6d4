"""Asynchronous GRPO's settings (rl_config.async_mode, max_staleness) against the layout and
the options the asynchronous loop can honour. Part of validate.py's checks: each refusal comes
before any worker starts, naming the key and the fix (docs/guides/async.md).

The engines generate the next batches while the actor trains, so they need devices of their
own: colocated engines (generate_config.rollout_devices: 0) share the actor's and stay
synchronous. Sleeping engines and the actor's offloaded training state exist only to share
those devices, and an engine put to sleep would stall the batch it is generating.
"""

from __future__ import annotations

from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig

ASYNC_MODES = ("off", "one_step", "bounded")


def staleness_bound(rl) -> int:
    """The policy versions a trained sample may lag the actor: 0 when synchronous, 1 for
    one_step, max_staleness when bounded."""
    return {"off": 0, "one_step": 1}.get(rl.async_mode, rl.max_staleness)


def check_async(run: RunConfig) -> list[Problem]:
    rl, gen = run.rl_config, run.generate_config
    out: list[Problem] = []
    staleness = rl.max_staleness
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        out.append(Problem("rl_config.max_staleness", "must be an integer >= 0 (policy "
                           "versions a trained sample may lag the actor's weights)",
                           "use 1 (one step off) or 2; 0 trains on-policy", staleness))
    out.extend(check_partial_rollouts(rl))
    if rl.async_mode == "off":
        return out
    if rl.async_mode == "one_step" and staleness != 1:
        out.append(Problem("rl_config.max_staleness", "one_step means a bound of 1",
                           "set async_mode: bounded to choose the bound, or max_staleness: 1",
                           staleness))
    if gen.rollout_devices <= 0:
        out.append(Problem("rl_config.async_mode", "needs engines on devices of their own: "
                           "this layout colocates them with the actor (generate_config."
                           "rollout_devices: 0), which stays synchronous",
                           "set generate_config.rollout_devices to the devices (on CPU, CPU "
                           "slots) the engines get, or async_mode: off", rl.async_mode))
    if gen.sleep_level:
        out.append(Problem("generate_config.sleep_level", "engines that sleep between "
                           "rollouts would stall the batch they generate in asynchronous mode",
                           "set sleep_level: 0 (engines on devices of their own keep their "
                           "memory)", gen.sleep_level))
    offloaded = [k for k in ("offload_train_param", "offload_train_grad",
                             "offload_train_optimizer") if getattr(gen, k)]
    for key in offloaded:
        out.append(Problem(f"generate_config.{key}", "offloads the actor's state while "
                           "colocated engines generate; asynchronous engines never share the "
                           "actor's devices", f"set {key}: false", True))
    return out


def check_partial_rollouts(rl) -> list[Problem]:
    """rl_config.partial_rollout_tokens: null, or chunks of K > 0 tokens in asynchronous mode
    (the synchronous loop syncs only between whole batches: chunks would buy nothing)."""
    tokens = rl.partial_rollout_tokens
    if tokens is None:
        return []
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        return [Problem("rl_config.partial_rollout_tokens", "must be an integer > 0 (new "
                        "tokens per sample in one chunk) or null", "use e.g. 64, or null for "
                        "whole generations", tokens)]
    if rl.async_mode == "off":
        return [Problem("rl_config.partial_rollout_tokens", "partial rollouts continue "
                        "generations across a weight sync: asynchronous mode only",
                        "set rl_config.async_mode: one_step or bounded, or "
                        "partial_rollout_tokens: null", tokens)]
    if rl.router_replay == "r3":
        return [Problem("rl_config.partial_rollout_tokens", "r3 replays the routes the "
                        "engine captured in one generate; a partial rollout's chunks are "
                        "several", "set partial_rollout_tokens: null, or router_replay: r2",
                        tokens)]
    if rl.log_route_agreement:
        return [Problem("rl_config.partial_rollout_tokens", "the route agreement compares the "
                        "routes the engine captured in one generate; a partial rollout's "
                        "chunks are several", "set partial_rollout_tokens: null, or "
                        "log_route_agreement: false", tokens)]
    return []


def rollout_correction(rl) -> str:
    """The rollout_is mode the actor's loss uses: with samples older than the actor (a
    staleness bound above 0) "off" means token, the behaviour weight of the decoupled
    objective (docs/guides/async.md#the-objective); otherwise rl_config.rollout_is."""
    if rl.rollout_is == "off" and staleness_bound(rl) > 0:
        return "token"
    return rl.rollout_is
