"""Hydra composition of configs/rlxf recipes, with configs/model as the `model` group.

Recipes are primary configs in configs/rlxf. Each one lists
`hydra.searchpath: [file://${mindrl.config_dir:}]`, which Hydra reads from the primary
config before it resolves the defaults list, so `- model: NAME` finds configs/model/NAME.yaml
from any working directory, both here (compose API) and under hydra.main in the CLI.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import STRUCTURE, ConfigError, Problem
from mindrl.config.parse import key_hint
from mindrl.config.resolvers import register_resolvers
from mindrl.config.schema import RunConfig
from mindrl.config.validate import validate
from mindrl.config.model_spec import available_models
from mindrl.paths import config_dir

# What a user sees: `cli/train_grpo.py` without `--config-name` (and `make demo`) runs it. The
# tiny model learns the rule max(a,b) and answers digit pairs it never trained on
# (docs/guides/demo.md#the-task).
DEFAULT_RECIPE = "grpo_tiny_max_cpu"
# What tests and scripts run: a+b= over 0..3, the fastest recipe that still has a reference
# model, a validation set and every metric; it memorises its 16 sums, so it is not the demo.
SMOKE_RECIPE = "grpo_tiny_cpu"


def recipe_dir() -> Path:
    return config_dir() / "rlxf"


def available_recipes() -> list[str]:
    return sorted(p.stem for p in recipe_dir().glob("*.yaml"))


def compose_recipe(name: str = DEFAULT_RECIPE, overrides: Sequence[str] = ()) -> DictConfig:
    """The composed, unresolved recipe (Hydra's own node removed); sys.argv is not read."""
    return compose_with_overrides(name, overrides)[0]


# Hydra's refusal of `+key=value` where the recipe holds the key already.
_HELD = re.compile(r"Could not append to config\. An item is already at '([^']+)'")


def compose_with_overrides(name: str, overrides: Sequence[str]) -> Tuple[DictConfig, List[str]]:
    """The composed recipe and the overrides as Hydra took them: a `+key=value` whose key the
    recipe holds is set as `++key=value`, since which keys a recipe declares (the asynchronous
    ones: common/async.yaml) is not the user's to know, and Hydra refuses that `+`."""
    register_resolvers()
    if not (recipe_dir() / f"{name}.yaml").is_file():
        near = difflib.get_close_matches(name, available_recipes(), n=1)
        hint = f"did you mean {near[0]!r}?" if near else "pick one of the shipped recipes"
        raise ConfigError([Problem("--config-name", f"no recipe {recipe_dir()}/{name}.yaml",
                                   f"{hint} ({', '.join(available_recipes())})", name,
                                   STRUCTURE)])
    overrides = list(overrides)
    while True:
        try:
            with initialize_config_dir(config_dir=str(recipe_dir()), version_base="1.3",
                                       job_name="mindrl"):
                return compose(config_name=name, overrides=overrides), overrides
        except HydraException as e:
            held = _HELD.search(str(e).splitlines()[0])
            at = _append_of(overrides, held.group(1)) if held else None
            if at is None:
                raise _refusal(e, overrides) from e
            overrides[at] = "+" + overrides[at]      # each retry fixes one: it ends


def _append_of(overrides: List[str], key: str) -> Optional[int]:
    """The index of the `+key=...` override (one `+`), or None."""
    for i, o in enumerate(overrides):
        if o.startswith("+") and not o.startswith("++") and o[1:].split("=", 1)[0] == key:
            return i
    return None


def _refusal(e: HydraException, overrides: List[str]) -> ConfigError:
    first = str(e).splitlines()[0]
    missing = re.match(r"Could not override '([^']+)'", first)
    if missing:
        key = missing.group(1)
        return ConfigError([Problem(key, "is not in the recipe", key_hint(key),
                                    category=STRUCTURE)])
    if "Could not find 'model/" in first:
        return ConfigError([Problem("model", first.split(": ", 1)[-1], "use one of "
                                    + ", ".join(available_models()), list(overrides),
                                    STRUCTURE)])
    return ConfigError([Problem("overrides", first, "check the override syntax "
                                "(key=value, +new_key=value, ++key=value) and group names "
                                "(model=NAME from configs/model)", list(overrides),
                                STRUCTURE)])


def load_recipe(name: str = DEFAULT_RECIPE, overrides: Sequence[str] = (),
                cluster: Optional[ClusterResources] = None, *,
                check_paths: bool = False) -> RunConfig:
    """Compose configs/rlxf/NAME.yaml with Hydra overrides and validate it (ConfigError)."""
    return validate(compose_recipe(name, overrides), cluster, check_paths=check_paths,
                    recipe=name)
