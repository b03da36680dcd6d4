"""The asynchronous rollout source's choices without Ray (trainer/async_source.py): which
source a recipe gets, when the proximal pass runs, and the loader position a checkpoint records (a resume
draws the batches in flight again), and scoring the next batch during an update."""

from types import SimpleNamespace

from mindrl.config import ClusterResources, load_recipe
from mindrl.rollout.sample_buffer import SampleBuffer
from mindrl.trainer.async_source import AsyncSource
from mindrl.trainer.grpo_trainer import GRPOTrainer, source_for
from mindrl.trainer.sync_source import SyncSource

CPU3 = ClusterResources("cpu", 3)
OWN_ENGINES = ["+generate_config.rollout_devices=1", "rl_config.colocate_actor_ref=true"]


def _run(*overrides):
    return load_recipe("grpo_tiny_cpu", [*OWN_ENGINES, *overrides], cluster=CPU3)


def test_the_recipe_picks_the_loop_and_the_proximal_pass_runs_as_in_the_synchronous_one():
    assert source_for(_run()) is SyncSource
    one_step = _run("+rl_config.async_mode=one_step")
    assert source_for(one_step) is AsyncSource
    # one update per batch: the update's own log-probs are the proximal policy
    assert not GRPOTrainer(one_step)._needs_old_log_probs()
    # two mini batches: the second updates from moved weights, so the pass runs
    two = _run("+rl_config.async_mode=one_step", "rl_config.mini_batch_size=4")
    assert GRPOTrainer(two)._needs_old_log_probs()


def test_a_checkpoint_records_the_loader_before_the_first_batch_not_yet_trained():
    source = AsyncSource(_run("+rl_config.async_mode=bounded",
                               "+rl_config.max_staleness=2"), parts=None)
    assert source.loader_state() is None               # before the first step
    source.buffer = SampleBuffer(2, 0, 10)
    for step, consumed in ((1, 0), (2, 8), (3, 16)):
        source.buffer.admit(step, 0, f"batch {step}", {"loader": {"seed": 1,
                                                                   "consumed": consumed}})
    source.buffer.take(1)                                 # step 1 trained; 2 and 3 in flight
    assert source.loader_state() == {"seed": 1, "consumed": 8}
    source.buffer.take(2)
    source.buffer.take(3)
    assert source.loader_state() is None               # nothing ahead: the loader's own


class _DoneGenerate:
    """A rollout handle whose generate has finished (what `rollout.submit` returns)."""

    def __init__(self, batch):
        self.batch, self.waits = batch, 0

    def done(self) -> bool:
        return True

    def wait(self):
        self.waits += 1
        return self.batch


def test_the_next_batch_done_before_the_update_is_scored_during_it_once():
    scored, updates = [], []
    parts = SimpleNamespace(reward_model=None, actor=SimpleNamespace(
        wait_update=lambda refs: updates.append(refs) or {"actor/loss": 0.1}))
    source = AsyncSource(_run("+rl_config.async_mode=one_step"), parts)
    source.buffer = SampleBuffer(1, 0, 10)
    source.buffer.admit(1, 0, _DoneGenerate("batch 1"))
    source.buffer.take(1)
    nxt = _DoneGenerate("batch 2")
    source.buffer.admit(2, 0, nxt)                    # step 2's batch, generated meanwhile
    source.sampler.score = lambda batch: (scored.append(batch) or [1.0, 0.0],
                                           {"reward/x": 0.5})
    assert source.wait_update(["update refs"], 1) == {"actor/loss": 0.1}
    assert updates == [["update refs"]] and scored == ["batch 2"]
    scores, metrics, seconds = source._ahead[2]
    assert (scores, metrics) == ([1.0, 0.0], {"reward/x": 0.5}) and seconds >= 0
    # the batch is scored once, whatever else calls for an update before step 2 takes it
    source.wait_update(["more"], 1)
    assert scored == ["batch 2"] and nxt.waits == 1
    # with a reward model the driver does not score ahead (its workers share the devices)
    source._ahead.clear()
    source.parts.reward_model = "a reward model"
    source.wait_update(["refs"], 1)
    assert 2 not in source._ahead
