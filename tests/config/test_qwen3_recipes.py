"""The MindSpeed-RL Qwen3 dense recipes at full size: their `+dry_run=true` plans from the CLI
show the A3 layouts they port, and their values are MindSpeed-RL's where MindRL has the key."""

import pytest

from mindrl.config import load_recipe, make_plan

from test_config_cli import run_cli

PLANS = {
    "grpo_qwen3_8b": ["model qwen3-8b (8.19B parameters)",
                      "actor   devices 0-15 (does not fit this cluster, shared with ref): "
                      "TP=2 PP=2 DP=4 micro_batch=1",
                      "vLLM TP=1 PP=1 x 16 instance(s), 2 prompts each, bfloat16"],
    "dapo_qwen3_32b": ["model qwen3-32b (32.76B parameters)",
                       "TP=8 PP=2 DP=1 micro_batch=1",
                       "vLLM TP=8 PP=1 x 2 instance(s), 16 prompts each, bfloat16"],
}


@pytest.mark.parametrize("recipe", sorted(PLANS))
def test_dry_run_plan_at_full_size(recipe, tmp_path):
    proc = run_cli(tmp_path, "--config-name", recipe, "+dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert f"plan for recipe {recipe}" in proc.stdout
    for line in PLANS[recipe]:
        assert line in proc.stdout, proc.stdout


def test_plans_fit_one_a3_node(recipe_clusters):
    for recipe in PLANS:
        cluster = recipe_clusters[recipe]
        plan = make_plan(load_recipe(recipe, cluster=cluster, check_paths=False), cluster, [])
        assert plan["fits_cluster"] and plan["devices_required"] == 16, plan["warnings"]


def test_grpo_qwen3_8b_keeps_mindspeed_rls_values(recipe_clusters):
    run = load_recipe("grpo_qwen3_8b", cluster=recipe_clusters["grpo_qwen3_8b"],
                      check_paths=False)
    mt, actor, rl, gen = run.megatron_training, run.actor_config, run.rl_config, \
        run.generate_config
    assert (mt.global_batch_size, mt.train_iters, mt.save_interval, mt.seed) == (32, 1000, 100, 1)
    assert (actor.lr, actor.weight_decay, actor.adam_beta2, actor.no_load_optim) == \
        (1e-6, 0.01, 0.95, True)
    assert (rl.kl_coef, rl.mini_batch_size, rl.n_samples_per_prompt) == (0.01, 32, 8)
    assert rl.verifier_function == ["base_acc"] and rl.colocates_all
    assert (gen.max_model_len, gen.max_num_batched_tokens, gen.sampling_config.max_tokens) == \
        (10240, 8192, 8192)


def test_dapo_qwen3_32b_keeps_mindspeed_rls_values(recipe_clusters):
    run = load_recipe("dapo_qwen3_32b", cluster=recipe_clusters["dapo_qwen3_32b"],
                      check_paths=False)
    actor, rl = run.actor_config, run.rl_config
    assert (actor.weight_decay, actor.adam_beta2, run.megatron_training.train_iters) == \
        (0.1, 0.999, 200)
    assert rl.kl_coef == 0.0 and run.active_roles == ["actor"]
    assert rl.verifier_function == ["acc_for_dapo"] and rl.dynamic_sampling
    assert run.generate_config.enforce_eager and run.generate_config.max_model_len == 4096
