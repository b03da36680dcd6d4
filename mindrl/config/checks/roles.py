"""Each role's own settings against its model and the devices: one params dtype, a vision
tower to freeze and a converted checkpoint for a VL model, a backend that suits the devices;
an image task only for a model with a vision tower; a warm start only of a tiny char_tools
model."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import CLUSTER, Problem
from mindrl.config.schema import PrepareConfig, RunConfig
from mindrl.device_kinds import BACKENDS


def check_roles(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Each role's dtype flags agree and its backend suits the devices."""
    out: list[Problem] = []
    for role in run.active_roles:
        cfg = run.role(role)
        if cfg.bf16 and cfg.fp16:
            out.append(Problem(names.role_key(run, role, "fp16"), "and bf16 are both true",
                               "choose one params dtype", True))
        spec = run.models.get(role)
        if cfg.freeze_vision_tower and spec is not None and spec.vision is None:
            out.append(Problem(names.role_key(run, role, "freeze_vision_tower"),
                               f"is set but model {spec.name} has no vision tower",
                               "remove it: it applies to vision-language models", True))
        if spec is not None and spec.vision is not None and not cfg.load:
            out.append(Problem(names.role_key(run, role, "load"), f"is not set, but model "
                               f"{spec.name} has a vision tower whose HF config only a "
                               f"converted checkpoint records", "convert the VL model "
                               "(examples/ckpt/ckpt_convert_qwen25vl_hf2mcore.sh) and point "
                               "load at it", cfg.load))
        backend = cfg.distributed_backend
        want = BACKENDS[cluster.device_type]
        if backend is not None and backend != want:
            out.append(Problem(names.role_key(run, role, "distributed_backend"), f"does not suit "
                               f"{cluster.device_type} devices", f"use {want} or leave it "
                               "null to follow the device", backend, CLUSTER))
    actor = run.models.get("actor")
    if run.prepare.task == "vl" and actor is not None and actor.vision is None:
        out.append(Problem("prepare.task", f"makes image prompts, but model {actor.name} has "
                           f"no vision tower", "use a VL model (e.g. tiny-qwen25vl) or task "
                           "arith", "vl"))
    out += _warm_start_problems(run.prepare)
    return out


def _warm_start_problems(p) -> list[Problem]:
    """prepare.warm_start's documents are characters (echo's with tool markers too): a tiny
    model with a character tokenizer."""
    if not p.warm_start:
        return []
    if not p.tiny_model:
        return [Problem("prepare.warm_start", "is set but prepare.tiny_model is not: only a "
                        "tiny model the run makes is warm-started", "set prepare.tiny_model "
                        "or remove prepare.warm_start", p.warm_start)]
    needs = names.WARM_START_TOKENIZERS[p.warm_start]
    if p.tokenizer not in needs:
        what = "characters and the tool markers" if needs == ("char_tools",) else "characters"
        return [Problem("prepare.warm_start", f"{p.warm_start} writes {what}, but "
                        f"prepare.tokenizer is {p.tokenizer}", "set prepare.tokenizer: "
                        f"{' or '.join(needs)}", p.warm_start)]
    if p.warm_start_steps < 1:
        return [Problem("prepare.warm_start_steps", "must be at least 1", "set a positive "
                        f"count ({PrepareConfig().warm_start_steps} by default) or remove "
                        "prepare.warm_start", p.warm_start_steps)]
    return []
