"""LoRA's keys (actor_config.lora): sizes that make an adapter, layers that exist, a sync that
is built, and a reference that can be the actor's base with its adapters off. Part of
validate.py's checks (one job: the *_config.lora keys)."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.placement import host_of
from mindrl.config.schema import RunConfig
from mindrl.config.structure import suggest

# Names a user may reach for that are refused on purpose, with why.
REFUSED_TARGETS = {
    "router": "the MoE router is never adapted (peers exclude it: an adapted router moves "
              "the routes away from the rollout engine's)",
    "experts": "adapters on experts are not built yet",
}


def check_lora(run: RunConfig) -> list[Problem]:
    out: list[Problem] = []
    for role in ("ref", "reward", "teacher"):
        if run.role(role).lora is None:
            continue
        key = names.role_key(run, role, "lora")
        if key.startswith("megatron_training"):
            if role != "ref":     # one problem for the shared section, not one per role
                continue
            out.append(Problem(key, "is shared by every role, but adapters are the actor's",
                               "move it to actor_config.lora", "set"))
        else:
            out.append(Problem(key, f"is set on the {role}: adapters train, and only the "
                               f"actor trains", "remove it (actor_config.lora)", "set"))
    lora = run.actor_config.lora
    if lora is None:
        return out
    if lora.rank < 1:
        out.append(Problem("actor_config.lora.rank", "must be at least 1", "use e.g. 32",
                           lora.rank))
    if not lora.alpha > 0:
        out.append(Problem("actor_config.lora.alpha", "must be above 0 (the update is scaled "
                           "by alpha / rank)", "use e.g. 2 x rank", lora.alpha))
    if not 0 <= lora.dropout < 1:
        out.append(Problem("actor_config.lora.dropout", "must be in [0, 1)", "use 0",
                           lora.dropout))
    if not lora.target_modules:
        out.append(Problem("actor_config.lora.target_modules", "is empty: nothing would train",
                           f"name some of {list(names.LORA_TARGETS)}", []))
    for target in lora.target_modules:
        if target in REFUSED_TARGETS:
            out.append(Problem("actor_config.lora.target_modules",
                               f"names {target!r}: {REFUSED_TARGETS[target]}",
                               f"keep to {list(names.LORA_TARGETS)}", target))
        elif target not in names.LORA_TARGETS:
            out.append(Problem("actor_config.lora.target_modules",
                               f"names {target!r}, not a linear layer of a block (these are: "
                               f"{', '.join(names.LORA_TARGETS)})",
                               suggest(target, names.LORA_TARGETS), target))
    if lora.sync == "adapter":
        out.append(Problem("actor_config.lora.sync", "adapter: sending the adapters alone to "
                           "the engines is not built yet", "set actor_config.lora.sync: "
                           "merged (the engines get W + B A, as full weights are sent)",
                           lora.sync))
    actor = run.models.get("actor")
    if actor is not None and actor.vision is not None:
        out.append(Problem("actor_config.lora", f"is set on a vision-language model "
                           f"({actor.name}): LoRA is built for text models", "remove it",
                           "set"))
    if run.actor_config.bf16 or run.actor_config.fp16:
        out.append(Problem("actor_config.lora", "is set with a half-precision actor: a frozen "
                           "bf16 base under fp32 adapters is not built yet", "train the "
                           "LoRA actor in fp32 (bf16: false)", "set"))
    if "ref" in run.active_roles:
        out += _reference(run)
    return out


def _reference(run: RunConfig) -> list[Problem]:
    """The reference is the actor's own base with its adapters off, so it must be the actor's
    checkpoint, in the actor's processes."""
    out: list[Problem] = []
    if run.ref_config.load != run.actor_config.load:
        out.append(Problem(names.role_key(run, "ref", "load"), "differs from the actor's: "
                           "with LoRA the reference is the actor's base with its adapters off",
                           "leave ref_config.load at the actor's", run.ref_config.load))
    if run.models.get("ref") != run.models.get("actor"):
        out.append(Problem("ref_config.model", "differs from the actor's: with LoRA the "
                           "reference is the actor's base", "leave ref_config.model at the "
                           "actor's", run.ref_config.model))
    if host_of(run, "ref") != "actor":
        out.append(Problem("rl_config.colocate_actor_ref", "does not put the reference in the "
                           "actor's processes, where a LoRA actor's base is", "set "
                           "rl_config.colocate_actor_ref: true (or colocate_all_models), "
                           "ref_in_actor_process: true, and ref_config at the actor's TP / PP",
                           run.rl_config.colocate_actor_ref))
    return out
