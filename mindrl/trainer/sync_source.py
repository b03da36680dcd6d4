"""The synchronous rollout source: each step's batch is generated when the step asks for it,
on the weights the last step synced, and nothing is in flight when the weights change.

A rollout source answers the step's two questions (trainer/grpo_trainer.GRPOTrainer.step):
"the next scored batch for step k" (`next_batch`) and "what the weight sync waits for"
(`sync`: here nothing, every generate was waited for), and says what its batches' versions
were (`version_metrics`, `distributions`) and where a checkpoint leaves the loader
(`loader_state`). The asynchronous source (trainer/async_source.py) answers the same.
"""

from __future__ import annotations

from typing import Dict, Optional

from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.trainer.log_prob_passes import timed
from mindrl.trainer.metrics import policy_version_metrics
from mindrl.trainer.sampling import Sampler


class SyncSource:
    def __init__(self, run: RunConfig, parts):
        self.run, self.parts = run, parts
        self.sampler = Sampler(run, parts)
        self._slept = False          # the engines gave their device memory to the actor

    def next_batch(self, step: int, timings: Dict[str, float]):
        """Step's batch with its scores, generated now; with rl_config.dynamic_sampling, only
        groups whose samples disagree (DAPO), generating more prompts as needed. Then the
        engines sleep (their device memory to the actor's passes) until the sync."""
        rows = self.parts.loader.next_batch()
        seed = self.sampler.seed(step, len(rows))
        batch, metrics = self.sampler.generate_and_score(rows, seed, timings)
        out = self.sampler.fill(batch, metrics, len(rows), seed, timings)
        self._slept = self.parts.rollout.sleep()
        return out

    def wait_update(self, refs, step: int) -> Dict[str, float]:
        """The actor's update, started (`refs`): nothing else to do meanwhile."""
        return self.parts.actor.wait_update(refs)

    def sync(self, step: int, timings: Dict[str, float]) -> Dict[str, float]:
        """The weight sync, every check waited for (nothing generates meanwhile); engines that
        slept wake for the weights, then for their KV cache."""
        rollout = self.parts.rollout
        with timed(timings, "reshard"):
            rollout.wake(["weights"])
            sync = self.parts.sync_weights(
                step, after_discarded_weights=self._slept and
                self.run.generate_config.sleep_level == 2)
            rollout.wake(["kv_cache"])
        return sync

    def version_metrics(self, batch: Batch, step: int) -> Dict[str, float]:
        return policy_version_metrics(batch, step - 1)

    def distributions(self, batch: Batch, step: int) -> Dict[str, list]:
        """Values per sample logged as histograms: none (every sample is on-policy)."""
        return {}

    def loader_state(self) -> Optional[dict]:
        """What a checkpoint saved now records as the loader's position (None: its own)."""
        return None
