"""What routing replay (rl_config.router_replay, docs/guides/routing-replay.md) asks of a
step's Megatron passes, and what it reports.

- off: no pass replays; the old-log-prob pass (when the step runs one) records the trainer's
  routes, so where the engine returned its routes the agreement is logged all the same;
  rl_config.log_route_agreement asks the engines for their routes and runs that pass.
- r2: the update replays `old_routes`, the routes the old-log-prob pass recorded; r2 turns
  that pass on (a step whose one update would otherwise skip it replays what a forward of the
  same weights picked).
- r3: the old-log-prob, reference and update passes replay `rollout_routes`, the engine's.

Metrics: `moe/route_agreement`, the fraction of (token, MoE layer) whose top-k expert set is
the same in the engine's routes and the trainer's old-log-prob pass, on a step that has both
(under r3 that pass replays the engine's routes, so it is 1.0 by construction and r3 forces
no pass for it: logged only where the pass runs anyway or log_route_agreement asks); and
`moe/route_replay_share`, the actor's seconds spent preparing replayed routes (old-log-prob
pass and update) over the step's.
"""

from __future__ import annotations

from typing import Dict, Optional

from mindrl.data.batch import Batch
from mindrl.models.route_replay import route_agreement

OLD_ROUTES, ROLLOUT_ROUTES = "old_routes", "rollout_routes"


def engine_route_kwargs(rl) -> Dict[str, bool]:
    """What the rollout engines are asked for: their routes (engines/vllm_routes.py) under r3
    and when the agreement is asked for (rl_config.log_route_agreement)."""
    wanted = rl.router_replay == "r3" or rl.log_route_agreement
    return {"with_routes": True} if wanted else {}


def needs_route_pass(rl) -> bool:
    """Whether the old-log-prob pass must run for routing's sake, even where each batch feeds
    one update: r2 replays what it records; the agreement compares what it records."""
    return rl.router_replay == "r2" or rl.log_route_agreement


def pass_replay(rl) -> Optional[str]:
    """The field the forward-only passes (old log-probs, reference) replay."""
    return ROLLOUT_ROUTES if rl.router_replay == "r3" else None


def update_replay(rl) -> Optional[str]:
    """The field the update replays."""
    return {"r2": OLD_ROUTES, "r3": ROLLOUT_ROUTES}.get(rl.router_replay)


def records_routes(run) -> bool:
    """Whether the old-log-prob pass records the routers' routes: a MoE actor whose layers
    sit on one rank (pipeline parallel size 1)."""
    return (run.models["actor"].is_moe
            and run.role("actor").pipeline_model_parallel_size == 1)


def replay_metrics(batch: Batch, metrics: Dict[str, float]) -> Dict[str, float]:
    out = {}
    if ROLLOUT_ROUTES in batch and OLD_ROUTES in batch:
        lengths = batch["prompt_mask"].sum(1) + batch["response_mask"].sum(1)
        out["moe/route_agreement"] = route_agreement(batch[ROLLOUT_ROUTES], batch[OLD_ROUTES],
                                                     lengths)
    step = metrics.get("timing_s/step")
    if "moe/route_replay_s" in metrics and step:
        out["moe/route_replay_share"] = metrics["moe/route_replay_s"] / step
    return out
