"""Which device indices each role gets, from the resource counts and colocation flags.

Shared by validation (does it fit the cluster?) and plan mode (print it), so both agree.
Colocated roles start on the same first device; the rollout engines always run on the
actor's devices, one per `infer TP x infer PP` of them (`engine_devices`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mindrl.config.schema import RunConfig


@dataclass(frozen=True)
class RolePlacement:
    role: str
    devices: tuple[int, ...]     # global indices; node = index // devices per node
    shares_with: tuple[str, ...]  # other roles on the same devices


def _groups(run: RunConfig) -> list[list[str]]:
    roles = run.active_roles
    rl = run.rl_config
    if rl.colocates_all:
        return [roles]
    if rl.colocate_actor_ref and "ref" in roles:
        return [["actor", "ref"]] + [[r] for r in roles if r not in ("actor", "ref")]
    return [[r] for r in roles]


def place_roles(run: RunConfig) -> list[RolePlacement]:
    """Active roles in order actor, ref, reward; groups packed one after another from 0."""
    out: dict[str, RolePlacement] = {}
    start = 0
    for group in _groups(run):
        counts = {r: max(run.resource(r).count, 0) for r in group}
        for r in group:
            out[r] = RolePlacement(r, tuple(range(start, start + counts[r])),
                                   tuple(o for o in group if o != r))
        start += max(counts.values())
    return [out[r] for r in run.active_roles]


def devices_required(run: RunConfig) -> int:
    return max((max(p.devices) + 1 for p in place_roles(run) if p.devices), default=0)


def world_size(run: RunConfig, role: str) -> int:
    """A role's device count; 0 when it has no (valid) resource entry."""
    res = run.resource(role)
    if res is None or len(res.items()) != 1:
        return 0
    return max(res.count, 0)


def data_parallel_size(run: RunConfig, role: str) -> int:
    """DP = devices / (TP x PP); 0 when the devices do not split evenly (validation says so)."""
    world = world_size(run, role)
    mp = run.role(role).model_parallel_size
    return world // mp if mp > 0 and world % mp == 0 else 0


def rollout_data_parallel_size(run: RunConfig) -> int:
    """vLLM instances on the actor's devices."""
    world = world_size(run, "actor")
    mp = run.generate_config.model_parallel_size
    return world // mp if mp > 0 and world % mp == 0 else 0


def engine_devices(run: RunConfig) -> list[tuple[int, ...]]:
    """The actor devices each rollout engine spans, in engine order: consecutive runs of
    infer TP x PP devices (empty when they do not divide the actor's devices)."""
    devices = next(p.devices for p in place_roles(run) if p.role == "actor")
    per_engine = run.generate_config.model_parallel_size
    if rollout_data_parallel_size(run) == 0:
        return []
    return [devices[i:i + per_engine] for i in range(0, len(devices), per_engine)]
