"""Which device indices each role gets, from the resource counts and colocation flags.

Shared by validation (does it fit the cluster?) and plan mode (print it), so both agree.
Colocated roles start on the same first device. The rollout engines run on the actor's devices
(the default) or, with `generate_config.rollout_devices: N`, on N devices of their own after
every role's (`rollout_devices`); either way one engine per `infer TP x infer PP` of them
(`engine_devices`). A reference (or a teacher) colocated with the actor at the actor's layout
lives in the actor's processes (`host_of`): one process per device instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mindrl.config.schema import RunConfig


@dataclass(frozen=True)
class RolePlacement:
    role: str
    devices: tuple[int, ...]     # global indices; node = index // devices per node
    shares_with: tuple[str, ...]  # other roles on the same devices
    host: Optional[str] = None    # the role whose processes hold this role's model


# The roles that may share the actor's devices on their own flag (colocate_all_models puts
# every role there): role -> (its colocation flag, its in-the-actor's-processes flag).
WITH_ACTOR = {"ref": ("colocate_actor_ref", "ref_in_actor_process"),
              "teacher": ("colocate_actor_teacher", "teacher_in_actor_process")}


def _colocated_with_actor(run: RunConfig, role: str) -> bool:
    rl = run.rl_config
    return role in WITH_ACTOR and (rl.colocates_all or getattr(rl, WITH_ACTOR[role][0]))


def _groups(run: RunConfig) -> list[list[str]]:
    roles = run.active_roles
    if run.rl_config.colocates_all:
        return [roles]
    with_actor = ["actor"] + [r for r in roles if _colocated_with_actor(run, r)]
    return [with_actor] + [[r] for r in roles if r not in with_actor]


def _layout(run: RunConfig, role: str) -> tuple:
    cfg = run.role(role)
    return (world_size(run, role), cfg.tensor_model_parallel_size,
            cfg.pipeline_model_parallel_size, cfg.expert_model_parallel_size,
            expert_tensor_parallel_size(cfg))


def host_of(run: RunConfig, role: str) -> Optional[str]:
    """"actor" when `role` is the reference (or the teacher), colocated with the actor at the
    actor's layout (devices, TP, PP, EP, expert TP) and rl_config.ref_in_actor_process
    (teacher_in_actor_process) is on: each actor rank then builds the role's model beside its
    own, as MindSpeed-RL's integrated worker and verl's actor-rollout-ref worker do (one
    process, and on a device one context, per device). Its passes then run one after the
    other on those ranks. None: processes of its own."""
    if (role not in run.active_roles or not _colocated_with_actor(run, role)
            or not getattr(run.rl_config, WITH_ACTOR[role][1])):
        return None
    return "actor" if _layout(run, role) == _layout(run, "actor") else None


def place_roles(run: RunConfig) -> list[RolePlacement]:
    """Active roles in order actor, ref, reward, teacher; groups packed one after another
    from 0."""
    out: dict[str, RolePlacement] = {}
    start = 0
    for group in _groups(run):
        counts = {r: max(run.resource(r).count, 0) for r in group}
        for r in group:
            out[r] = RolePlacement(r, tuple(range(start, start + counts[r])),
                                   tuple(o for o in group if o != r), host_of(run, r))
        start += max(counts.values())
    return [out[r] for r in run.active_roles]


def _roles_end(run: RunConfig) -> int:
    """The first device after every role's."""
    return max((max(p.devices) + 1 for p in place_roles(run) if p.devices), default=0)


def engines_colocated(run: RunConfig) -> bool:
    """Whether the engines share the actor's devices (generate_config.rollout_devices: 0)."""
    return run.generate_config.rollout_devices <= 0


def rollout_devices(run: RunConfig) -> tuple[int, ...]:
    """The devices the engines run on: the actor's, or N of their own after every role's."""
    if engines_colocated(run):
        return next(p.devices for p in place_roles(run) if p.role == "actor")
    first = _roles_end(run)
    return tuple(range(first, first + run.generate_config.rollout_devices))


def devices_required(run: RunConfig) -> int:
    return max(_roles_end(run), max(rollout_devices(run), default=-1) + 1)


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


def expert_tensor_parallel_size(cfg) -> int:
    """A role's expert TP (`cfg`: its MegatronConfig): its expert_tensor_parallel_size, or
    the role's TP when null (Megatron's default)."""
    etp = cfg.expert_tensor_parallel_size
    return cfg.tensor_model_parallel_size if etp is None else etp


def token_dispatcher_type(cfg) -> str:
    """A MoE role's token dispatcher: its moe_token_dispatcher_type, or when null the one its
    layout needs: alltoall at EP > 1 (allgather needs equal token counts on every EP rank, and
    DP ranks' micro batches differ), allgather at EP 1 (where it always ran)."""
    given = cfg.moe_token_dispatcher_type
    if given is not None:
        return given
    return "alltoall" if cfg.expert_model_parallel_size > 1 else "allgather"


def rollout_data_parallel_size(run: RunConfig) -> int:
    """vLLM instances: the engines' devices / (infer TP x PP); 0 when they do not divide."""
    world = (world_size(run, "actor") if engines_colocated(run)
             else run.generate_config.rollout_devices)
    mp = run.generate_config.model_parallel_size
    return world // mp if mp > 0 and world % mp == 0 else 0


def engine_devices(run: RunConfig) -> list[tuple[int, ...]]:
    """The devices each rollout engine spans, in engine order: consecutive runs of infer TP x
    PP devices of `rollout_devices` (empty when they do not divide them)."""
    devices = rollout_devices(run)
    per_engine = run.generate_config.model_parallel_size
    if rollout_data_parallel_size(run) == 0:
        return []
    return [devices[i:i + per_engine] for i in range(0, len(devices), per_engine)]
