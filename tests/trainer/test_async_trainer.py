"""The asynchronous loop's choices without Ray (trainer/async_trainer.py): which loop a recipe
gets, the proximal pass it forces, and the loader position a checkpoint records (a resume
draws the batches in flight again)."""

from mindrl.config import ClusterResources, load_recipe
from mindrl.rollout.sample_buffer import SampleBuffer
from mindrl.trainer.async_trainer import AsyncGRPOTrainer, trainer_for
from mindrl.trainer.grpo_trainer import GRPOTrainer

CPU3 = ClusterResources("cpu", 3)
OWN_ENGINES = ["+generate_config.rollout_devices=1", "rl_config.colocate_actor_ref=true"]


def _run(*overrides):
    return load_recipe("grpo_tiny_cpu", [*OWN_ENGINES, *overrides], cluster=CPU3)


def test_the_recipe_picks_the_loop_and_stale_samples_force_the_proximal_pass():
    assert trainer_for(_run()) is GRPOTrainer
    one_step = _run("+rl_config.async_mode=one_step")
    assert trainer_for(one_step) is AsyncGRPOTrainer
    # the tiny recipe feeds one update per batch: no old-log-prob pass when synchronous
    assert not GRPOTrainer(_run())._needs_old_log_probs()
    assert AsyncGRPOTrainer(one_step)._needs_old_log_probs()
    bound0 = _run("+rl_config.async_mode=bounded", "+rl_config.max_staleness=0")
    assert not AsyncGRPOTrainer(bound0)._needs_old_log_probs()


def test_a_checkpoint_records_the_loader_before_the_first_batch_not_yet_trained():
    trainer = AsyncGRPOTrainer(_run("+rl_config.async_mode=bounded",
                                    "+rl_config.max_staleness=2"))
    assert trainer._loader_state() is None               # before the first step
    trainer.buffer = SampleBuffer(2, 0, 10)
    for step, consumed in ((1, 0), (2, 8), (3, 16)):
        trainer.buffer.admit(step, 0, f"batch {step}", {"loader": {"seed": 1,
                                                                   "consumed": consumed}})
    trainer.buffer.take(1)                                 # step 1 trained; 2 and 3 in flight
    assert trainer._loader_state() == {"seed": 1, "consumed": 8}
    trainer.buffer.take(2)
    trainer.buffer.take(3)
    assert trainer._loader_state() is None               # nothing ahead: the loader's own
