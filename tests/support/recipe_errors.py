"""The ConfigError a recipe with overrides raises (config tests assert its key and words)."""

import pytest

from mindrl.config import ConfigError, load_recipe


def recipe_error(recipe, overrides, cluster, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, overrides, cluster=cluster, **kw)
    return info.value


def problem_of(err: ConfigError, key: str):
    """The error's Problem for `key` (failing, with the whole error, if it names none)."""
    found = [p for p in err.problems if p.key == key]
    assert found, str(err)
    return found[0]
