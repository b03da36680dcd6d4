"""Recipes: Hydra composition, typed schema, validation and plan (dry-run) mode."""

from mindrl.config.cluster import ClusterResources, local_cluster
from mindrl.config.compose import (DEFAULT_RECIPE, SMOKE_RECIPE, available_recipes,
                                   compose_recipe, load_recipe, recipe_dir)
from mindrl.config.errors import ConfigError, Problem
from mindrl.config.plan import format_plan, make_plan
from mindrl.config.resolvers import register_resolvers, work_dir
from mindrl.config.schema import (GenerateConfig, MegatronConfig, ResourceSpec, RLConfig,
                                  RunConfig, SamplingConfig)
from mindrl.config.validate import check, validate, validate_lenient

register_resolvers()

__all__ = [
    "ClusterResources", "ConfigError", "DEFAULT_RECIPE", "GenerateConfig", "MegatronConfig",
    "Problem", "RLConfig", "ResourceSpec", "RunConfig", "SMOKE_RECIPE", "SamplingConfig",
    "available_recipes", "check", "compose_recipe", "format_plan", "load_recipe",
    "local_cluster", "make_plan", "recipe_dir", "register_resolvers", "validate",
    "validate_lenient", "work_dir",
]
