"""A composed recipe (DictConfig or plain dict) -> RunConfig, or ConfigError naming each key.

Only shape is checked here (known keys, types, required keys, model names); how the
values fit together is validate.py's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mindrl.config.errors import STRUCTURE, ConfigError, Problem
from mindrl.config.names import ROLE_SECTIONS
from mindrl.config.ported_layers import translate_noop_layers
from mindrl.config.schema import (RUN_WIDE_KEYS, AgentConfig, GenerateConfig, MegatronConfig,
                                  PrepareConfig, RLConfig, RunConfig)
from mindrl.config.structure import build, check_partial, failed, field_types, suggest
from mindrl.config.model_spec import ModelSpec, load_model_spec

SECTIONS = ("model", "megatron_training", "actor_config", "ref_config", "reward_config",
            "teacher_config", "rl_config", "generate_config", "prepare", "agent_config")
TOP_LEVEL_SCALARS = {"run_dir": (str, type(None)), "dry_run": (bool,)}


SECTION_TYPES = {"megatron_training": MegatronConfig, "actor_config": MegatronConfig,
                 "ref_config": MegatronConfig, "reward_config": MegatronConfig,
                 "teacher_config": MegatronConfig,
                 "rl_config": RLConfig, "generate_config": GenerateConfig,
                 "prepare": PrepareConfig, "agent_config": AgentConfig}


def key_hint(dotted: str) -> str:
    """For a dotted key the recipe lacks: a spelling suggestion, or that it is a valid key."""
    parts = dotted.split(".")
    if parts[0] not in SECTION_TYPES:
        return suggest(parts[0], set(SECTIONS) | set(TOP_LEVEL_SCALARS))
    cls = SECTION_TYPES[parts[0]]
    for i, part in enumerate(parts[1:], start=1):
        types = field_types(cls)
        if part not in types:
            return f"{'.'.join(parts[:i])}: {suggest(part, types)}"
        cls = types[part]
        if not dataclasses.is_dataclass(cls):
            inner = [a for a in getattr(cls, "__args__", ()) if dataclasses.is_dataclass(a)]
            if not inner:
                break
            cls = inner[0]
    return f"{dotted} is a valid key absent from this recipe: write +{dotted}=VALUE"


def to_plain(raw: Any) -> dict:
    """Resolve interpolations; an unresolvable one is reported with its key."""
    if isinstance(raw, DictConfig):
        try:
            return OmegaConf.to_container(raw, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as e:
            key = getattr(e, "full_key", None) or "<recipe>"
            reason = str(e).splitlines()[0]
            raise ConfigError([Problem(key, f"cannot be resolved ({reason})",
                                       "set the value or fix the interpolation",
                                       category=STRUCTURE)]) from None
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("<recipe>", f"is a {type(raw).__name__}, not a mapping",
                                   "pass the composed recipe", category=STRUCTURE)])
    return dict(raw)


def _model(raw: Any, problems: list[Problem]) -> Optional[ModelSpec]:
    if raw is None:
        problems.append(Problem("model", "is missing", "add `- model: NAME` to the recipe's "
                                "defaults list (NAME from configs/model)", category=STRUCTURE))
        return None
    if not isinstance(raw, Mapping):
        problems.append(Problem("model", "is not a mapping", "compose a configs/model file "
                                "with `- model: NAME` in defaults", raw, STRUCTURE))
        return None
    try:
        return ModelSpec.from_dict(raw, source="model")
    except (ValueError, TypeError) as e:
        problems.append(Problem("model", str(e), "fix the model keys (see "
                                "configs/model/*.yaml)", category=STRUCTURE))
        return None


def _role_model(section: str, name: Optional[str], composed: ModelSpec,
                problems: list[Problem]) -> Optional[ModelSpec]:
    if name is None or name == composed.name:
        return composed
    if section == "megatron_training":
        problems.append(Problem(f"{section}.model", f"differs from the composed model "
                                f"{composed.name!r}", "write `model: ${model.name}` or override "
                                "both (`model=NAME megatron_training.model=NAME`)", name,
                                STRUCTURE))
        return None
    try:
        return load_model_spec(name)
    except (FileNotFoundError, ValueError) as e:
        problems.append(Problem(f"{section}.model", str(e), "name a file of configs/model",
                                name, STRUCTURE))
        return None


# MindSpeed-RL's names for MindRL keys: (section, its name) -> MindRL's key in that section.
ALIASES = {("rl_config", "init_kl_coef"): "kl_coef",
           ("rl_config", "overlong_buffer"): "overlong_buffer_len",
           ("rl_config", "overlong_buffer_penalty_factor"): "overlong_penalty_factor",
           ("rl_config", "filter_groups_enable"): "dynamic_sampling"}


def _apply_aliases(data: dict, problems: list[Problem]) -> dict:
    """A ported recipe's alias becomes MindRL's key; both given with different values is
    refused (which one would win is not obvious)."""
    for (section, alias), key in ALIASES.items():
        values = data.get(section)
        if not isinstance(values, Mapping) or alias not in values:
            continue
        values = dict(values)
        value = values.pop(alias)
        if key in values and values[key] != value:
            problems.append(Problem(f"{section}.{alias}", f"is MindSpeed-RL's name for "
                                    f"{section}.{key}, which is set too, to {values[key]!r}",
                                    f"keep one of {section}.{alias} and {section}.{key}",
                                    value, STRUCTURE))
        values[key] = value
        data = {**data, section: values}
    return data


def parse(raw: Any, recipe: Optional[str] = None) -> RunConfig:
    """Typed RunConfig, or ConfigError listing every unknown, mistyped or missing key."""
    problems: list[Problem] = []
    data = translate_noop_layers(_apply_aliases(to_plain(raw), problems), problems)
    known = set(SECTIONS) | set(TOP_LEVEL_SCALARS)
    for key, value in data.items():
        if key not in known:
            problems.append(Problem(str(key), "is not a known section", suggest(str(key), known),
                                    category=STRUCTURE))
        elif key in TOP_LEVEL_SCALARS and not isinstance(value, TOP_LEVEL_SCALARS[key]):
            problems.append(Problem(key, f"has type {type(value).__name__}", f"set {key} to "
                                    f"{'true or false' if key == 'dry_run' else 'a path'}",
                                    value, STRUCTURE))

    model = _model(data.get("model"), problems)
    shared = build(MegatronConfig, data.get("megatron_training") or {}, "megatron_training",
                   problems)
    roles: dict[str, Any] = {}
    for role, section in ROLE_SECTIONS.items():
        values = check_partial(MegatronConfig, data.get(section) or {}, section, problems)
        for key in RUN_WIDE_KEYS:
            if key in values:
                problems.append(Problem(f"{section}.{key}", "is shared by all roles",
                                        f"set megatron_training.{key} instead", values[key],
                                        STRUCTURE))
        if not failed(shared):
            roles[role] = dataclasses.replace(shared, **values)
    rl = build(RLConfig, data.get("rl_config") or {}, "rl_config", problems)
    gen = build(GenerateConfig, data.get("generate_config") or {}, "generate_config", problems)
    prepare = build(PrepareConfig, data.get("prepare") or {}, "prepare", problems)
    agent = build(AgentConfig, data.get("agent_config") or {}, "agent_config", problems)

    models: dict[str, ModelSpec] = {}
    if model is not None and not failed(shared):
        shared_model = _role_model("megatron_training", shared.model, model, problems)
        for role, section in ROLE_SECTIONS.items():
            name = roles[role].model
            spec = shared_model if name == shared.model else _role_model(section, name, model,
                                                                          problems)
            if spec is not None and spec.vision is not None and role == "reward":
                if rl is not None and rl.reward_model:
                    problems.append(Problem(
                        f"{section}.model", f"is a vision-language model ({spec.name}): a "
                        f"reward model scores text only", "use a text reward model, or rule "
                        "verifiers (rl_config.verifier_function)", name, STRUCTURE))
                continue                           # no reward role: nothing to build
            if spec is not None:
                # A reward model is its architecture with a scalar score head.
                models[role] = dataclasses.replace(spec, head="scalar") if role == "reward" \
                    else spec
    if problems:
        raise ConfigError(problems)
    return RunConfig(model=model, megatron_training=shared, actor_config=roles["actor"],
                     ref_config=roles["ref"], reward_config=roles["reward"], rl_config=rl,
                     generate_config=gen, models=models, run_dir=data.get("run_dir"),
                     dry_run=bool(data.get("dry_run", False)), recipe=recipe, prepare=prepare,
                     agent_config=agent, teacher_config=roles["teacher"])
