"""Prompt rows -> a scored batch: what every rollout source does to fill a step.

Generation (the engine group, with the actor's training state offloaded where the recipe asks),
scoring (rule verifiers and / or the reward model) and dynamic sampling's extra rounds. The
sources (trainer/sync_source.py, trainer/async_source.py) decide when and on which weights;
this module decides nothing about time.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Dict, List, Optional, Tuple

import ray
import torch

from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.rollout.interleaved import submit_interleaved
from mindrl.rollout.partial_handle import submit_in_chunks
from mindrl.trainer.dynamic_sampling import sample_informative
from mindrl.trainer.log_prob_passes import timed
from mindrl.trainer.metrics import reward_model_metrics
from mindrl.trainer.route_replay_step import engine_route_kwargs

# A round of fresh samples: (prompt rows, sampling seed, the step's timings) -> scored batch.
Round = Callable[[List[dict], int, Dict[str, float]], Tuple[Batch, Dict[str, float]]]


class Sampler:
    def __init__(self, run: RunConfig, parts):
        self.run, self.parts = run, parts
        self.rl, self.gen = run.rl_config, run.generate_config
        self.n = self.rl.n_samples_per_prompt

    def seed(self, step: int, prompts: int) -> int:
        """The sampling seed of step's first generation round."""
        return (self.gen.sampling_config.seed or 0) + step * prompts * self.n

    def engine_kwargs(self) -> dict:
        """What every generate of a step passes the engines besides the batch and seed."""
        return {**self.parts.prompts.rollout_kwargs, **engine_route_kwargs(self.rl)}

    def submit(self, batch: Batch, seed: int, chunk: Optional[int] = None, routes: bool = True,
               **overrides):
        """Start generating `batch` and return its handle: one generate per engine for a
        single turn in one piece, else through the rollout's bookkeeping
        (rollout/partial_handle.py) in chunks of `chunk` tokens (partial rollouts), each sample
        one episode (a multi-turn episode's turns are calls of their own). `routes`: the MoE
        routes routing replay needs (not for validation)."""
        rollout = self.parts.rollout
        kwargs = {**(self.engine_kwargs() if routes else self.parts.prompts.rollout_kwargs),
                  **overrides}
        episode = self.episode(batch)
        if chunk is None and episode is None:
            return rollout.submit(batch, seed=seed, **kwargs)
        if episode is not None:             # a turn ends at a call's end too
            kwargs.setdefault("stop_token_ids", self.parts.agent.stop_token_ids)
        if chunk is None:
            chunk = kwargs.get("max_tokens", self.gen.sampling_config.max_tokens)
        if episode is not None:             # each episode goes on as its turn is answered
            return submit_interleaved(rollout, batch, chunk, episode, seed=seed, **kwargs)
        return submit_in_chunks(rollout, batch, chunk, seed=seed, **kwargs)

    def episode(self, batch: Batch):
        """A fresh episode for the submitted `batch`: the tool loop with agent_config.tools,
        an environment per sample with agent_config.environment (its row: the label and the
        dataset's additional keys; trainer/agent.py), else None (a single turn)."""
        agent = self.parts.agent
        return None if agent is None else agent.episode(batch, self.parts.prompts.extra_keys)

    def generate_and_score(self, rows: List[dict], seed: int, timings: Dict[str, float]):
        """A fresh round on the engines' current weights, waited for and scored."""
        with timed(timings, "gen"):
            with self._training_state_offloaded():
                batch = self.submit(self.parts.prompts.batch(rows, self.n), seed).wait()
        with timed(timings, "reward"):
            scores, metrics = self.score(batch)
        return with_scores(batch, scores), metrics

    def score(self, batch: Batch) -> Tuple[List[float], Dict[str, float]]:
        """Per sample: rule score (weighted verifiers) + reward_model_weight x reward-model
        score, each part present when its rl_config switch is on. Verifiers get the whole
        response (an episode's inserted text included; an environment's: its final answer),
        the label and the dataset's additional keys as keywords; the rule score carries DAPO's
        overlong penalty when rl_config.overlong_buffer_len is set (rewards/overlong_penalty),
        an agent run's agent_config.call_bonus, and an environment's reward as
        agent_config.reward says (trainer/agent.py)."""
        parts, prompts = self.parts, self.parts.prompts
        scores, metrics = [0.0] * len(batch), {}
        if parts.reward is not None:
            responses = batch.response_lists()
            texts = (prompts.tokenizer.batch_decode(responses, skip_special_tokens=True)
                     if parts.agent is None else parts.agent.scoring_texts(batch))
            extras = [{k: batch[k][i] for k in prompts.extra_keys} for i in range(len(batch))]
            scores, metrics = parts.reward.score(texts, batch["label"], extras,
                                                 [len(r) for r in responses])
        if parts.agent is not None and parts.agent.call_bonus:
            bonus = parts.agent.bonus(batch)
            metrics = {**metrics, "critic/call_bonus/mean": sum(bonus) / max(len(bonus), 1)}
            scores = [s + b for s, b in zip(scores, bonus)]
        if parts.agent is not None:
            scores = parts.agent.scored(batch, scores)
        if parts.reward_model is not None:
            model_scores = parts.reward_model.compute_scores(ray.put(
                prompts.for_workers(batch)), self.run.reward_config.micro_batch_size)
            metrics = {**metrics, **reward_model_metrics(model_scores)}
            weight = self.rl.reward_model_weight
            scores = [s + weight * m for s, m in zip(scores, model_scores.tolist())]
        return scores, metrics

    def fill(self, batch: Batch, metrics: Dict[str, float], prompts: int, seed: int,
             timings: Dict[str, float], fresh: Round = None):
        """The scored batch as the step trains on it: with rl_config.dynamic_sampling, its
        informative groups topped up by further rounds of `fresh` (default: a whole
        generation on the current weights; trainer/dynamic_sampling.py)."""
        if not self.rl.dynamic_sampling:
            return batch, metrics
        fresh = fresh or self.generate_and_score
        return sample_informative(
            batch, metrics, prompts, self.rl.max_gen_rounds,
            lambda r: fresh(self.parts.loader.next_batch(), seed + r * 1_000_003, timings))

    @contextmanager
    def _training_state_offloaded(self):
        """Colocated actor + rollout: move what generate_config.offload_train_* names to host
        memory while vLLM generates, and back before the next Megatron pass."""
        g = self.gen
        flags = (g.offload_train_param, g.offload_train_grad, g.offload_train_optimizer)
        if not any(flags):
            yield
            return
        self.parts.actor.offload(*flags)
        try:
            yield
        finally:
            self.parts.actor.onload()


def with_scores(batch: Batch, scores: List[float]) -> Batch:
    return batch.add(scores=torch.tensor(scores, dtype=torch.float32))
