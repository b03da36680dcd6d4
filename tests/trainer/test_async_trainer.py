"""The asynchronous loop's choices without Ray (trainer/async_trainer.py): which loop a recipe
gets, when the proximal pass runs, and the loader position a checkpoint records (a resume
draws the batches in flight again)."""

from mindrl.config import ClusterResources, load_recipe
from mindrl.rollout.sample_buffer import SampleBuffer
from mindrl.trainer.async_trainer import AsyncGRPOTrainer, trainer_for
from mindrl.trainer.grpo_trainer import GRPOTrainer

CPU3 = ClusterResources("cpu", 3)
OWN_ENGINES = ["+generate_config.rollout_devices=1", "rl_config.colocate_actor_ref=true"]


def _run(*overrides):
    return load_recipe("grpo_tiny_cpu", [*OWN_ENGINES, *overrides], cluster=CPU3)


def test_the_recipe_picks_the_loop_and_the_proximal_pass_runs_as_in_the_synchronous_one():
    assert trainer_for(_run()) is GRPOTrainer
    one_step = _run("+rl_config.async_mode=one_step")
    assert trainer_for(one_step) is AsyncGRPOTrainer
    # one update per batch: the update's own log-probs are the proximal policy
    assert not AsyncGRPOTrainer(one_step)._needs_old_log_probs()
    # two mini batches: the second updates from moved weights, so the pass runs
    two = _run("+rl_config.async_mode=one_step", "rl_config.mini_batch_size=4")
    assert AsyncGRPOTrainer(two)._needs_old_log_probs()


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
