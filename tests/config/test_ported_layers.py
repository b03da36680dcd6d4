"""MindSpeed-RL's no-op layers (a model padded so the pipeline divides it) read as MindRL's
uneven pipeline: the same real layers on each stage, or a refusal naming the fix."""

import pytest

from mindrl.config import ConfigError, load_recipe
from mindrl.config.ported_layers import stage_counts_from_noop

RECIPE = "grpo_qwen3_235b_a22b"
EP1 = "generate_config.infer_expert_parallel_size=1"
MINDSPEED = [f"~actor_config.{k}" for k in ("decoder_first_pipeline_num_layers",
                                             "decoder_last_pipeline_num_layers")]


def test_qwen3_235b_s_noop_layers_are_its_uneven_stages():
    # MindSpeed-RL's grpo_qwen3_235b_a22b_A2: num_layers 96, noop_layers "5,95", PP16
    counts, why = stage_counts_from_noop(96, 16, [5, 95])
    assert why == "" and counts == [5] + [6] * 14 + [5]


def test_a_ported_actor_config_gets_the_first_and_last_stage_counts(recipe_clusters):
    run = load_recipe(RECIPE, [EP1, *MINDSPEED, "+actor_config.num_layers=96",
                               "+actor_config.noop_layers='5,95'"],
                      cluster=recipe_clusters[RECIPE], check_paths=False)
    assert (run.actor_config.decoder_first_pipeline_num_layers,
            run.actor_config.decoder_last_pipeline_num_layers) == (5, 5)


@pytest.mark.parametrize("extra,key,words", [
    (["+actor_config.noop_layers='5,50'"], "actor_config.noop_layers",
     "stage(s) [8] between the first and the last hold empty layers"),
    (["+actor_config.noop_layers='5,95'", "+actor_config.num_layers=98"],
     "actor_config.num_layers", "set it to 96"),
    (["+actor_config.noop_layers=five"], "actor_config.noop_layers", "not a list"),
])
def test_noop_layers_that_are_no_uneven_split_are_refused(recipe_clusters, extra, key, words):
    with pytest.raises(ConfigError) as e:
        load_recipe(RECIPE, [EP1, *MINDSPEED, *extra], cluster=recipe_clusters[RECIPE],
                    check_paths=False)
    assert key in e.value.keys and words in str(e.value), str(e.value)
