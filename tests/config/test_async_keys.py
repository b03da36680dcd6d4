"""The asynchronous keys (docs/guides/async.md) as the guide writes them: every recipe
composes configs/rlxf/common/async.yaml, which declares them at the schema's defaults, so
`rl_config.async_mode=bounded` sets them as any recipe key, and `+rl_config.async_mode=bounded`
(the spelling older commands and tests use) still does (config/compose.py hands Hydra a `+` on
a key the recipe holds as `++`). Declaring them changes no run: the values are the defaults."""

import dataclasses

import pytest
from omegaconf import OmegaConf

from mindrl.config import ClusterResources, available_recipes, compose_recipe, load_recipe
from mindrl.config.compose import compose_with_overrides, recipe_dir
from mindrl.config.parse import parse
from mindrl.config.schema import GenerateConfig, RLConfig

TINY = "grpo_tiny_cpu"
CPU3 = ClusterResources("cpu", 3)
OWN_ENGINES = ("generate_config.rollout_devices=1", "rl_config.colocate_actor_ref=true")
SHARED = recipe_dir() / "common" / "async.yaml"
SCHEMA = {"rl_config": RLConfig, "generate_config": GenerateConfig}


def _declared():
    return {(section, key): value for section, values in
            OmegaConf.to_container(OmegaConf.load(SHARED)).items()
            for key, value in values.items()}


def test_the_shared_file_declares_the_guide_s_keys_at_the_schema_defaults():
    declared = _declared()
    assert set(declared) == {("rl_config", "async_mode"), ("rl_config", "max_staleness"),
                             ("rl_config", "partial_rollout_tokens"),
                             ("rl_config", "inflight_sync"),
                             ("generate_config", "rollout_devices")}
    for (section, key), value in declared.items():
        default = {f.name: f.default for f in dataclasses.fields(SCHEMA[section])}[key]
        assert value == default and type(value) is type(default), (section, key, value)


@pytest.mark.parametrize("name", available_recipes())
def test_every_recipe_declares_them_and_keeps_the_defaults(name):
    raw = compose_recipe(name)
    for (section, key), value in _declared().items():
        assert raw[section][key] == value, (name, section, key)
    run = parse(raw, name)
    assert (run.rl_config.async_mode, run.rl_config.max_staleness,
            run.rl_config.partial_rollout_tokens, run.rl_config.inflight_sync,
            run.generate_config.rollout_devices) == ("off", 1, None, "off", 0)


@pytest.mark.parametrize("plus", ["", "+", "++"])
def test_the_guide_s_overrides_with_or_without_plus(plus):
    overrides = [f"{plus}rl_config.async_mode=bounded", f"{plus}rl_config.max_staleness=2",
                 f"{plus}rl_config.inflight_sync=keep_kv", *(plus + o for o in OWN_ENGINES)]
    run = load_recipe(TINY, overrides, cluster=CPU3)
    assert (run.rl_config.async_mode, run.rl_config.max_staleness, run.rl_config.inflight_sync,
            run.generate_config.rollout_devices) == ("bounded", 2, "keep_kv", 1)
    run = load_recipe(TINY, [f"{plus}rl_config.async_mode=bounded",
                             f"{plus}rl_config.partial_rollout_tokens=8", *OWN_ENGINES],
                      cluster=CPU3)
    assert run.rl_config.partial_rollout_tokens == 8


def test_a_plus_on_a_held_key_is_handed_to_hydra_as_plus_plus():
    """Any key the recipe holds (kl_coef), not only the asynchronous ones; a key it lacks
    keeps its `+` (Hydra adds it), and `++` is left as it is."""
    raw, taken = compose_with_overrides(TINY, ["+rl_config.kl_coef=0.5",
                                               "+rl_config.router_replay=off",
                                               "++rl_config.max_staleness=3",
                                               "+rl_config.async_mode=one_step"])
    assert taken == ["++rl_config.kl_coef=0.5", "+rl_config.router_replay=off",
                     "++rl_config.max_staleness=3", "++rl_config.async_mode=one_step"]
    assert (raw.rl_config.kl_coef, raw.rl_config.max_staleness,
            raw.rl_config.async_mode) == (0.5, 3, "one_step")
