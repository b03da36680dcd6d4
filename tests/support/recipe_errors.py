"""The ConfigError a recipe with overrides raises (config tests assert its key and words)."""

import pytest

from mindrl.config import ConfigError, load_recipe


def recipe_error(recipe, overrides, cluster, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, overrides, cluster=cluster, **kw)
    return info.value
