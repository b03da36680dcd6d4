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
from typing import Optional, Sequence

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
    register_resolvers()
    if not (recipe_dir() / f"{name}.yaml").is_file():
        near = difflib.get_close_matches(name, available_recipes(), n=1)
        hint = f"did you mean {near[0]!r}?" if near else "pick one of the shipped recipes"
        raise ConfigError([Problem("--config-name", f"no recipe {recipe_dir()}/{name}.yaml",
                                   f"{hint} ({', '.join(available_recipes())})", name,
                                   STRUCTURE)])
    try:
        with initialize_config_dir(config_dir=str(recipe_dir()), version_base="1.3",
                                   job_name="mindrl"):
            return compose(config_name=name, overrides=list(overrides))
    except HydraException as e:
        first = str(e).splitlines()[0]
        missing = re.match(r"Could not override '([^']+)'", first)
        if missing:
            key = missing.group(1)
            raise ConfigError([Problem(key, "is not in the recipe", key_hint(key),
                                       category=STRUCTURE)]) from e
        if "Could not find 'model/" in first:
            raise ConfigError([Problem("model", first.split(": ", 1)[-1], "use one of "
                                       + ", ".join(available_models()), list(overrides),
                                       STRUCTURE)]) from e
        raise ConfigError([Problem("overrides", first, "check the override syntax "
                                   "(key=value, +new_key=value, ++key=value) and group names "
                                   "(model=NAME from configs/model)", list(overrides),
                                   STRUCTURE)]) from e


def load_recipe(name: str = DEFAULT_RECIPE, overrides: Sequence[str] = (),
                cluster: Optional[ClusterResources] = None, *,
                check_paths: bool = False) -> RunConfig:
    """Compose configs/rlxf/NAME.yaml with Hydra overrides and validate it (ConfigError)."""
    return validate(compose_recipe(name, overrides), cluster, check_paths=check_paths,
                    recipe=name)
