"""Each role's devices: one device count, of this cluster's kind, a multiple of its TP x PP,
and the whole layout (roles, the engines' own devices, engines within a node) fits the
cluster. Cluster-dependent problems carry CLUSTER, so plan mode can report them as warnings."""

from __future__ import annotations

from typing import Optional

from mindrl.config import names
from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import CLUSTER, STRUCTURE, Problem
from mindrl.config.placement import devices_required, engine_devices, place_roles
from mindrl.config.schema import ResourceSpec, RunConfig


MISSING_WHY = {"ref": "kl_coef > 0 needs a reference model",
               "reward": "reward_model=true needs devices for the reward model",
               "teacher": "distill_loss needs devices for the teacher (or "
                          "rl_config.colocate_actor_teacher: true)"}


def _resource_problem(key: str, res: Optional[ResourceSpec]) -> Optional[Problem]:
    if res is None:
        return None
    set_keys = [k for k, _ in res.items()]
    if len(set_keys) != 1:
        return Problem(key, f"sets {set_keys or 'no device count'}",
                       "give exactly one of num_npus, num_gpus, num_cpus",
                       category=STRUCTURE)
    if res.count < 1:
        return Problem(f"{key}.{set_keys[0]}", "must be at least 1",
                       "give the role at least one device", res.count)
    return None


def check_resources(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Counts are positive, of this cluster's kind, split into TP x PP, and fit the cluster."""
    out: list[Problem] = []
    for role in run.active_roles:
        key = f"rl_config.{names.ROLE_RESOURCES[role]}"
        res = run.resource(role)
        if res is None:
            why = MISSING_WHY[role]
            out.append(Problem(key, f"is missing ({why})", f"add {key}: {{"
                               f"{cluster.resource_key}: N}} or colocate the role",
                               category=STRUCTURE))
            continue
        problem = _resource_problem(key, res)
        if problem:
            out.append(problem)
            continue
        rkey = f"{key}.{res.items()[0][0]}"
        if res.kind != cluster.device_type:
            out.append(Problem(rkey, f"asks for {res.kind} devices but the cluster has "
                               f"{cluster.device_type} ({cluster.describe()})",
                               f"use {key}.{cluster.resource_key}", res.count, CLUSTER))
        mp = run.role(role).model_parallel_size
        if mp >= 1 and res.count % mp:
            cfg = run.role(role)
            out.append(Problem(rkey, f"is not a multiple of TP x PP = "
                               f"{cfg.tensor_model_parallel_size} x "
                               f"{cfg.pipeline_model_parallel_size} ({role})",
                               f"use a multiple of {mp} devices", res.count))
    if any(p.category != CLUSTER for p in out):
        return out
    imp = run.generate_config.model_parallel_size
    actor = run.resource("actor")
    own = run.generate_config.rollout_devices
    if own < 0 or (own and imp >= 1 and own % imp):
        out.append(Problem("generate_config.rollout_devices",
                           "must be 0 (engines on the actor's devices) or a positive multiple "
                           f"of infer TP x PP = {imp}",
                           f"use 0 or a multiple of {imp}", own))
        return out
    if own:
        need, roles_need = devices_required(run), devices_required(run) - own
        if roles_need <= cluster.total_devices < need:   # roles too many: said below
            out.append(Problem("generate_config.rollout_devices",
                               f"asks for {own} device(s) of the engines' own after the roles' "
                               f"{roles_need}: {need} devices, but the cluster has "
                               f"{cluster.total_devices} ({cluster.describe()})",
                               f"lower it to at most {max(cluster.total_devices - roles_need, 0)}"
                               f", set 0 to run the engines on the actor's devices, or add "
                               f"nodes", own, CLUSTER))
    elif imp >= 1 and actor.count % imp:
        out.append(Problem("generate_config.infer_tensor_parallel_size",
                           f"x infer_pipeline_parallel_size = {imp} does not divide the "
                           f"actor's {actor.count} devices (vLLM runs on them)",
                           f"use an inference TP x PP dividing {actor.count}",
                           run.generate_config.infer_tensor_parallel_size))
    kinds = {run.resource(r).kind for r in run.active_roles}
    if len(kinds) > 1:
        out.append(Problem("rl_config.actor_resource", f"roles ask for mixed device kinds "
                           f"{sorted(kinds)}", "give every role the same kind of device"))
        return out
    for placed in place_roles(run):
        if placed.devices and max(placed.devices) >= cluster.total_devices:
            key = f"rl_config.{names.ROLE_RESOURCES[placed.role]}"
            res = run.resource(placed.role)
            need = max(p.devices[-1] for p in place_roles(run) if p.devices) + 1
            out.append(Problem(f"{key}.{res.items()[0][0]}", f"brings the run to {need} "
                               f"devices but the cluster has {cluster.total_devices} "
                               f"({cluster.describe()})", "lower the resource counts, "
                               "colocate roles (rl_config.colocate_actor_ref) or add nodes",
                               res.count, CLUSTER))
            break
    for index, span in enumerate(engine_devices(run)):
        if cluster.node_of(span[0]) != cluster.node_of(span[-1]):
            counts = sorted(set(cluster.node_device_counts))
            out.append(Problem("generate_config.infer_tensor_parallel_size",
                               f"x infer_pipeline_parallel_size = {len(span)}: rollout engine "
                               f"{index} would span devices {span[0]}-{span[-1]}, across nodes "
                               f"({cluster.describe()}; an engine's TP group stays on one node)",
                               f"use an inference TP x PP dividing each node's devices "
                               f"({', '.join(map(str, counts))})",
                               run.generate_config.infer_tensor_parallel_size, CLUSTER))
            break
    return out

