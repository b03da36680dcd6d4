"""Every shipped recipe composes through Hydra and validates on the cluster it targets."""

import os

import pytest

from mindrl.config import (DEFAULT_RECIPE, SMOKE_RECIPE, available_recipes, compose_recipe,
                           load_recipe, work_dir)
from mindrl.paths import REPO_ROOT


def test_every_shipped_recipe_has_a_target_cluster(recipe_clusters):
    assert set(available_recipes()) == set(recipe_clusters)
    assert DEFAULT_RECIPE in available_recipes()
    assert SMOKE_RECIPE in available_recipes()


def test_recipe_composes_and_validates(recipe_name, recipe_clusters):
    run = load_recipe(recipe_name, cluster=recipe_clusters[recipe_name], check_paths=False)
    assert run.recipe == recipe_name
    assert run.model.name == run.megatron_training.model
    assert run.actor_config.model_parallel_size >= 1
    assert run.rl_config.verifier_function


@pytest.mark.parametrize("name, verifier", [(SMOKE_RECIPE, "arith"),
                                            (DEFAULT_RECIPE, "max_digit")])
def test_tiny_recipe_is_the_cpu_default(name, verifier, cpu2):
    run = load_recipe(name, cluster=cpu2)
    assert run.model.name == "tiny-qwen2"
    assert run.actor_config.params_dtype == "float32"
    assert run.generate_config.dtype == "float32" and run.generate_config.enforce_eager
    assert run.rl_config.verifier_function == [verifier]
    total = sum(run.resource(r).count for r in run.active_roles)
    assert total <= 2 and run.resource("actor").kind == "cpu"


def test_the_default_is_the_task_that_generalises_and_smoke_the_small_table(cpu2):
    """What a user sees (`make demo`, the CLI without --config-name) is max(a,b)= over 100
    digit pairs with 25 held out; tests and scripts run the 16-sum a+b= table, which still
    has a reference model and a validation set (every metric)."""
    assert (DEFAULT_RECIPE, SMOKE_RECIPE) == ("grpo_tiny_max_cpu", "grpo_tiny_cpu")
    default, smoke = (load_recipe(n, cluster=cpu2) for n in (DEFAULT_RECIPE, SMOKE_RECIPE))
    assert (default.prepare.task, default.prepare.holdout_pairs) == ("max", 25)
    assert (smoke.prepare.task, smoke.prepare.max_operand, smoke.prepare.holdout_pairs) == (
        "arith", 3, 4)
    for run in (default, smoke):
        assert run.active_roles == ["actor", "ref"]
        assert run.rl_config.val_data_path.endswith("/val.jsonl")
    assert "max_holdout25" in default.rl_config.val_data_path
    assert "arith_0to3_holdout4" in smoke.rl_config.val_data_path


def test_r1_zero_7b_matches_the_guide_layout(recipe_clusters):
    run = load_recipe("r1_zero_qwen25_7b", cluster=recipe_clusters["r1_zero_qwen25_7b"])
    assert (run.actor_config.tensor_model_parallel_size,
            run.actor_config.pipeline_model_parallel_size) == (4, 2)
    assert run.resource("actor").count == 16 and run.actor_config.bf16
    assert run.generate_config.infer_tensor_parallel_size == 4
    assert run.rl_config.n_samples_per_prompt == 8


def test_tiny_paths_do_not_depend_on_cwd(tmp_path, monkeypatch, cpu2):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINDRL_WORK_DIR", raising=False)
    run = load_recipe(DEFAULT_RECIPE, cluster=cpu2)
    assert work_dir() == (REPO_ROOT / "work").resolve()
    for path in (run.megatron_training.data_path, run.actor_config.load, run.actor_config.save,
                 run.run_dir):
        assert os.path.isabs(path) and path.startswith(str(work_dir()))
    assert run.actor_config.save == run.run_dir
    monkeypatch.setenv("MINDRL_WORK_DIR", str(tmp_path / "w"))
    run = load_recipe(DEFAULT_RECIPE, cluster=cpu2)
    assert run.megatron_training.data_path.startswith(str(tmp_path / "w"))


def test_overrides_and_model_group_swap(cpu2):
    run = load_recipe(DEFAULT_RECIPE, ["model=tiny-llama", "rl_config.kl_coef=0"],
                      cluster=cpu2)
    assert run.model.name == "tiny-llama" and run.models["actor"].architecture == "llama"
    assert run.active_roles == ["actor"]  # no KL term: no reference model
    cfg = compose_recipe(DEFAULT_RECIPE, ["+dry_run=true"])
    assert cfg.dry_run is True and "hydra" not in cfg
