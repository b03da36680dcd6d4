"""Routing replay's setting (rl_config.router_replay) against the models and the rollout
engine. Part of validate.py's checks: each refusal comes before any worker starts, naming the
key and the fix (docs/guides/routing-replay.md).

Replay needs routers (a MoE actor). Recording routes (r2's old-log-prob pass, the agreement
metric) reads every layer's router on one rank, so r2 and rl_config.log_route_agreement need
the actor at pipeline parallel size 1; r3 replays at any layout. r3 and the agreement need the
rollout engine's routes: where vLLM returns them itself (platforms/vllm_abilities.py: CUDA) it
needs its prefix cache on and one pipeline stage; where the engine's workers capture them
(CPU, Ascend), no graph replay may skip the capture (enforce_eager).
"""

from __future__ import annotations

from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig
from mindrl.platforms.vllm_abilities import abilities

REPLAY_MODES = ("off", "r2", "r3")


def check_replay(run: RunConfig) -> list[Problem]:
    return _check_mode(run) or check_route_agreement(run)


def _check_mode(run: RunConfig) -> list[Problem]:
    mode = run.rl_config.router_replay
    if mode == "off":
        return []
    key = "rl_config.router_replay"
    spec = run.models["actor"]
    if not spec.is_moe:
        return [Problem(key, f"replays a MoE model's routes, and {spec.name} (the actor's "
                        f"model, {spec.architecture}) has no experts",
                        "set rl_config.router_replay: off", mode)]
    out = []
    if mode == "r2" and run.role("actor").pipeline_model_parallel_size > 1:
        out.append(Problem(key, "r2 records the old-log-prob pass's routes, which needs every "
                           "MoE layer on one rank (actor pipeline parallel size 1)",
                           "use r3 (replays at any layout) or pipeline_model_parallel_size: 1",
                           mode))
    if mode == "r3":
        out += _engine_routes(run, key, mode, "use r2 or off")
    return out


def _engine_routes(run: RunConfig, key: str, value, fix: str) -> list[Problem]:
    """What the rollout engine needs to hand its routes back, on the actor's device kind."""
    res, gen = run.resource("actor"), run.generate_config
    if res is None:
        return []
    can = abilities(res.kind)
    if can.returns_routes:
        needs = [(name, want) for name, have, want in
                 (("enable_prefix_caching", gen.enable_prefix_caching, True),
                  ("infer_pipeline_parallel_size", gen.infer_pipeline_parallel_size, 1))
                 if have != want]
        return [Problem(key, f"takes the rollout engine's routes, which {res.kind}'s vLLM "
                        f"returns only with generate_config.{name}: {str(want).lower()}",
                        f"set generate_config.{name}: {str(want).lower()}, or {fix}", value)
                for name, want in needs]
    if can.graphs and not gen.enforce_eager:
        return [Problem(key, f"takes the rollout engine's routes, which on {res.kind} are "
                        f"captured in the engine's workers, and a graph replay runs none of "
                        f"that capture", f"set generate_config.enforce_eager: true, or {fix}",
                        value)]
    return []


def check_route_agreement(run: RunConfig) -> list[Problem]:
    """rl_config.log_route_agreement: the trainer's routes are recorded on one rank, so it
    needs a MoE actor at pipeline parallel size 1."""
    if not run.rl_config.log_route_agreement:
        return []
    key, spec = "rl_config.log_route_agreement", run.models["actor"]
    if not spec.is_moe:
        return [Problem(key, f"compares a MoE model's routes, and {spec.name} (the actor's "
                        f"model, {spec.architecture}) has no experts",
                        "set rl_config.log_route_agreement: false", True)]
    if run.role("actor").pipeline_model_parallel_size > 1:
        return [Problem(key, "the old-log-prob pass records the trainer's routes on one rank "
                        "(actor pipeline parallel size 1)",
                        "set rl_config.log_route_agreement: false, or "
                        "pipeline_model_parallel_size: 1", True)]
    return _engine_routes(run, key, True, "set rl_config.log_route_agreement: false")
