"""Routing replay's setting (rl_config.router_replay) against the models and the rollout
engine. Part of validate.py's checks: each refusal comes before any worker starts, naming the
key and the fix (docs/guides/routing-replay.md).

Replay needs routers (a MoE actor). Recording routes (r2's old-log-prob pass, the agreement
metric) reads every layer's router on one rank, so r2 and rl_config.log_route_agreement need
the actor at pipeline parallel size 1; r3 replays at any layout. r3 and the agreement need the
rollout engine to return its routes.
"""

from __future__ import annotations

from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig

REPLAY_MODES = ("off", "r2", "r3")
# Whether the rollout engine returns its routes: engines/vllm_routes.py captures them in the
# engine's workers (vLLM's modular MoE kernels, the CPU one among them).
ENGINE_RETURNS_ROUTES = True


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
    if mode == "r3" and not ENGINE_RETURNS_ROUTES:
        out.append(Problem(key, "r3 replays the rollout engine's routes, and this engine "
                           "build returns none", "use r2 or off", mode))
    return out


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
    if not ENGINE_RETURNS_ROUTES:
        return [Problem(key, "compares the rollout engine's routes, and this engine build "
                        "returns none", "set rl_config.log_route_agreement: false", True)]
    return []
