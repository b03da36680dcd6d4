"""config/roles.py: each role's setup read from the recipe, as the ranks receive it."""

from mindrl.config import load_recipe
from mindrl.config.roles import role_setup


def test_role_setups_follow_the_recipe(recipe_clusters):
    run = load_recipe("r1_zero_qwen25_7b", cluster=recipe_clusters["r1_zero_qwen25_7b"])
    rl, actor_cfg = run.rl_config, run.actor_config
    actor, ref = role_setup(run, "actor", pad_id=7), role_setup(run, "ref", pad_id=7)
    assert (actor.parallel.tensor_model_parallel_size, actor.parallel.pipeline_model_parallel_size,
            actor.parallel.sequence_parallel) == (actor_cfg.tensor_model_parallel_size,
                                                  actor_cfg.pipeline_model_parallel_size,
                                                  actor_cfg.sequence_parallel)
    assert actor.spec == run.models["actor"] and actor.load == actor_cfg.load
    assert actor.pad_id == ref.pad_id == 7
    # The lr schedule counts optimizer steps: one per mini batch, epochs times per step.
    per_step = run.megatron_training.global_batch_size // rl.mini_batch_size * rl.epochs
    assert actor.optim.train_iters == actor_cfg.train_iters * per_step
    assert actor.optim.lr == actor_cfg.lr and ref.optim is None   # the reference only infers
    assert actor.loss.policy_loss == "ppo_clip"
    assert actor.loss.kl_coef == rl.kl_coef and actor.loss.use_kl_loss == (
        rl.use_kl_loss and rl.kl_coef > 0)
    assert actor.loss.temperature == run.generate_config.sampling_config.temperature
