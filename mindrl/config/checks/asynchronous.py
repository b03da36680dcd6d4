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
    out.extend(check_inflight_sync(run))
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


def check_inflight_sync(run: RunConfig) -> list[Problem]:
    """rl_config.inflight_sync: what an engine taking weights in between decode steps
    (engines/vllm_inflight.py) can honour."""
    rl, gen, key = run.rl_config, run.generate_config, "rl_config.inflight_sync"
    mode = rl.inflight_sync
    if mode == "off":
        return []
    if mode not in ("keep_kv", "recompute_kv"):
        return [Problem(key, "must be off, keep_kv or recompute_kv", "use keep_kv or off",
                        mode)]
    if rl.async_mode == "off":
        return [Problem(key, "the synchronous loop syncs between whole batches: nothing is "
                        "in flight", "set rl_config.async_mode: one_step or bounded, or "
                        "inflight_sync: off", mode)]
    out = []
    if rl.partial_rollout_tokens is not None:
        out.append(Problem(key, "partial rollouts stop the engines for the sync; an in-flight "
                           "sync does not stop them", "choose one: partial_rollout_tokens: "
                           "null, or inflight_sync: off", mode))
    if gen.infer_tensor_parallel_size > 1:
        out.append(Problem(key, "built for engines at infer TP 1 (at TP > 1 vLLM's workers "
                           "are processes of their own; not tested)", "set "
                           "generate_config.infer_tensor_parallel_size: 1, or inflight_sync: "
                           "off", mode))
    if rl.router_replay == "r3" or rl.log_route_agreement:
        out.append(Problem(key, "routes are captured in one uninterrupted generate", "set "
                           "router_replay: r2 and log_route_agreement: false, or "
                           "inflight_sync: off", mode))
    actor = run.models.get("actor")
    if mode == "keep_kv" and gen.enable_prefix_caching:
        out.append(Problem(key, "keep_kv keeps requests running across a sync, so vLLM "
                           "cannot reset its prefix cache then", "set generate_config."
                           "enable_prefix_caching: false, or inflight_sync: recompute_kv",
                           mode))
    if actor is not None and actor.is_multimodal:
        out.append(Problem(key, "vLLM's image encoder cache cannot be reset while requests "
                           "that use it run", "set inflight_sync: off (or "
                           "partial_rollout_tokens, which stops them for the sync)", mode))
    return out


def rollout_correction(rl) -> str:
    """The rollout_is mode the actor's loss uses: with samples older than the actor (a
    staleness bound above 0) "off" means token, the behaviour weight of the decoupled
    objective (docs/guides/async.md#the-objective); otherwise rl_config.rollout_is."""
    if rl.rollout_is == "off" and staleness_bound(rl) > 0:
        return "token"
    return rl.rollout_is
