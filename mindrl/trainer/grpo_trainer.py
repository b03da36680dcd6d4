"""The GRPO loop, one step top to bottom:

    prompts -> rollout (the vLLM engine group) -> rewards (rule verifiers and / or the reward
    model) -> old log-probs (actor, when a batch feeds more than one update) -> ref
    log-probs (when KL is on) -> advantages -> actor update -> reshard (Megatron -> vLLM)

The loop holds no model and builds nothing: trainer/assemble.py makes the run's parts (roles
are Ray worker groups, mindrl/workers, the reward model the "reward" role; the rollout engines
a data-parallel group of Ray actors, mindrl/rollout; rule rewards in the verifier process
pool), trainer/lifecycle.py resumes, syncs first, saves, reports a failure and shuts down, and
the maths is mindrl/algorithms.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Dict, List, Tuple

import ray
import torch

from mindrl import startup
from mindrl.algorithms import entropy_coeff_at
from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.trainer.advantage_step import advantage_fields
from mindrl.trainer.assemble import RunParts, assemble
from mindrl.trainer.dynamic_sampling import sample_informative
from mindrl.trainer.lifecycle import RunLifecycle
from mindrl.trainer.log_prob_passes import LogProbPass, run_passes, timed
from mindrl.trainer.metrics import (batch_metrics, perf_metrics, policy_version_metrics,
                                    reward_model_metrics)
from mindrl.trainer.prompt_batches import image_metrics
from mindrl.trainer.route_replay_step import (OLD_ROUTES, engine_route_kwargs,
                                              needs_route_pass, pass_replay, records_routes,
                                              replay_metrics, update_replay)


class GRPOTrainer:
    def __init__(self, run: RunConfig, log=print):
        self.run, self.log = run, log
        self.rl, self.gen = run.rl_config, run.generate_config
        self.n = self.rl.n_samples_per_prompt
        self.parts: RunParts = None       # assembled by fit
        self.distributions: Dict[str, list] = {}   # the last step's values per sample

    # ------------------------------------------------------------------ one step

    def _generate_and_score(self, rows: List[dict], seed: int, timings: Dict[str, float]):
        with timed(timings, "gen"):
            with self._training_state_offloaded():
                prompts = self.parts.prompts
                batch = self.parts.rollout.generate(prompts.batch(rows, self.n), seed=seed,
                                                    **prompts.rollout_kwargs,
                                                    **engine_route_kwargs(self.rl))
        with timed(timings, "reward"):
            scores, metrics = self._score(batch)
        return batch.add(scores=torch.tensor(scores, dtype=torch.float32)), metrics

    def _score(self, batch: Batch) -> Tuple[List[float], Dict[str, float]]:
        """Per sample: rule score (weighted verifiers) + reward_model_weight x reward-model
        score, each part present when its rl_config switch is on. Verifiers get the label and
        the dataset's additional keys as keywords; the rule score carries DAPO's overlong
        penalty when rl_config.overlong_buffer_len is set (rewards/overlong_penalty)."""
        parts, prompts = self.parts, self.parts.prompts
        scores, metrics = [0.0] * len(batch), {}
        if parts.reward is not None:
            responses = batch.response_lists()
            texts = prompts.tokenizer.batch_decode(responses, skip_special_tokens=True)
            extras = [{k: batch[k][i] for k in prompts.extra_keys} for i in range(len(batch))]
            scores, metrics = parts.reward.score(texts, batch["label"], extras,
                                                 [len(r) for r in responses])
        if parts.reward_model is not None:
            model_scores = parts.reward_model.compute_scores(ray.put(
                prompts.for_workers(batch)), self.run.reward_config.micro_batch_size)
            metrics = {**metrics, **reward_model_metrics(model_scores)}
            weight = self.rl.reward_model_weight
            scores = [s + weight * m for s, m in zip(scores, model_scores.tolist())]
        return scores, metrics

    def _sample(self, step: int, timings: Dict[str, float]):
        """One batch of rollouts with their scores; with rl_config.dynamic_sampling, only
        groups whose samples disagree (DAPO), generating more prompts as needed."""
        rows = self.parts.loader.next_batch()
        seed = self._seed(step, len(rows))
        batch, metrics = self._generate_and_score(rows, seed, timings)
        return self._fill(batch, metrics, len(rows), seed, timings)

    def _seed(self, step: int, prompts: int) -> int:
        """The sampling seed of step's first generation round."""
        return (self.gen.sampling_config.seed or 0) + step * prompts * self.n

    def _fill(self, batch: Batch, metrics: Dict[str, float], prompts: int, seed: int,
              timings: Dict[str, float]):
        """The scored batch as the step trains on it: with rl_config.dynamic_sampling, its
        informative groups topped up by further rounds (trainer/dynamic_sampling.py)."""
        if not self.rl.dynamic_sampling:
            return batch, metrics
        return sample_informative(
            batch, metrics, prompts, self.rl.max_gen_rounds,
            lambda r: self._generate_and_score(self.parts.loader.next_batch(),
                                               seed + r * 1_000_003,
                                               timings))

    def _log_prob_passes(self, batch_ref, step: int,
                         timings: Dict[str, float]) -> Dict[str, torch.Tensor]:
        """Old (actor) and reference log-probs (trainer/log_prob_passes.py)."""
        rl, passes = self.rl, []
        if self._needs_old_log_probs():
            # Without a forward micro batch of its own, the pass plans like the update it
            # feeds: the first mini batch's importance ratio is then exactly 1.
            like_update = (None if rl.actor_forward_micro_batch_size else
                           (rl.mini_batch_size * self.n, rl.shuffle_mini_batch, step))
            passes.append(LogProbPass("old_log_prob", "old_log_probs", self.parts.actor,
                                      rl.actor_forward_micro_batch_size
                                      or self.run.actor_config.micro_batch_size, like_update,
                                      OLD_ROUTES if records_routes(self.run) else None,
                                      pass_replay(rl)))
        if rl.uses_reference:
            passes.append(LogProbPass("ref", "ref_log_probs", self.parts.groups["ref"],
                                      rl.ref_forward_micro_batch_size
                                      or self.run.ref_config.micro_batch_size,
                                      replay=pass_replay(rl)))
        return run_passes(passes, batch_ref, rl.blocking, timings)

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

    def _needs_old_log_probs(self) -> bool:
        """An old-logprob pass is redundant when each batch feeds exactly one update (unless
        routing replay r2 replays its routes or the route agreement compares them)."""
        return needs_route_pass(self.rl) or not (
            self.rl.mini_batch_size == self.run.megatron_training.global_batch_size
            and self.rl.epochs == 1)

    def step(self, step: int) -> Dict[str, float]:
        rl, parts = self.rl, self.parts
        prompts, rollout, actor = parts.prompts, parts.rollout, parts.actor
        # Every phase's key is logged each step; a phase the step skips (old log-probs when
        # each batch feeds one update, ref without KL) costs 0 s.
        timings = {f"timing_s/{k}": 0.0 for k in ("old_log_prob", "ref")}
        t_step = time.perf_counter()
        batch, reward_metrics = self._sample(step, timings)
        slept = self._sleep_engines()         # device memory to the actor until the sync
        scores = batch["scores"]
        batch.add(**self._log_prob_passes(ray.put(prompts.for_workers(batch)), step, timings))
        with timed(timings, "adv"):
            batch.add(**advantage_fields(batch, rl))
        entropy_coeff = entropy_coeff_at(step, rl.entropy_coeff, rl.entropy_coeff_final,
                                         rl.entropy_decay_steps)
        with timed(timings, "update_actor"):   # from the weights of step - 1's update
            update = self._update(actor.submit_update(
                ray.put(prompts.for_workers(batch)), rl.mini_batch_size * self.n,
                rl.shuffle_mini_batch, step, entropy_coeff, update_replay(rl)), step)
        update["actor/entropy_coeff"] = entropy_coeff
        self._before_sync(step, timings)
        with timed(timings, "reshard"):
            rollout.wake(["weights"])
            sync = parts.sync_weights(
                step, after_discarded_weights=slept and self.gen.sleep_level == 2,
                **self._sync_options(step))
            rollout.wake(["kv_cache"])
        self._after_sync()
        metrics = {**batch_metrics(batch, scores, batch["finish_reason"]), **reward_metrics,
                   **image_metrics(batch), **self._version_metrics(batch, step),
                   **update, **sync, **parts.data_metrics, **timings}
        timings["timing_s/step"] = time.perf_counter() - t_step
        metrics.update(timings)
        metrics.update(perf_metrics(metrics))
        metrics.update(replay_metrics(batch, metrics))
        self.distributions = self._version_distributions(batch, step)
        return metrics

    # Where the asynchronous loop (trainer/async_trainer.py) differs; here, synchronous.

    def _sleep_engines(self) -> bool:
        return self.parts.rollout.sleep()

    def _sync_options(self, step: int) -> dict:
        """The sync's options beyond the policy's: here none (every check waited for)."""
        return {}

    def _update(self, refs, step: int) -> Dict[str, float]:
        """The actor's update, started (`refs`): here the driver just waits for it."""
        return self.parts.actor.wait_update(refs)

    def _before_sync(self, step: int, timings: Dict[str, float]) -> None:
        """Nothing is in flight here: the step's generate was waited for."""

    def _after_sync(self) -> None:
        """Nothing was paused for the sync here."""

    def _version_metrics(self, batch: Batch, step: int) -> Dict[str, float]:
        return policy_version_metrics(batch, step - 1)

    def _version_distributions(self, batch: Batch, step: int) -> Dict[str, list]:
        """Values per sample logged as histograms: none here (every sample is on-policy)."""
        return {}

    def _loader_state(self):
        """What a checkpoint saved now records as the loader's position (None: its own)."""
        return None

    def validate(self, step: int) -> Dict[str, float]:
        """Score the held-out prompts with the validation sampling (greedy by default)."""
        rl, prompts = self.rl, self.parts.prompts
        batch = self.parts.rollout.generate(prompts.batch(self.parts.val_rows, rl.val_n_samples),
                                            temperature=rl.val_temperature, seed=step,
                                            **prompts.rollout_kwargs)
        scores, metrics = self._score(batch)
        out = {"val/score": sum(scores) / len(scores)}
        out.update({"val/" + k.split("/", 1)[1]: v for k, v in metrics.items()
                    if k.split("/", 1)[1] in rl.verifier_function})
        if "critic/reward_model/mean" in metrics:
            out["val/reward_model"] = metrics["critic/reward_model/mean"]
        return out

    def _validation_due(self, step: int, start: int) -> bool:
        if not self.parts.val_rows:
            return False
        if step == start:   # before the first step of this run; a resumed run already has it
            return self.rl.val_before_train and start == 0
        freq = self.rl.val_freq
        return bool(freq) and (step % freq == 0 or step == self.run.megatron_training.train_iters)

    # ------------------------------------------------------------------ loop

    def fit(self) -> List[Dict[str, float]]:
        self.parts = assemble(self.run, self.log)
        startup.started()                     # the driver's start ends (cli/train_grpo.py)
        with RunLifecycle(self.run, self.parts, self.log) as life:
            start = life.begin()
            if self._validation_due(start, start):
                self.parts.tracker.log(start, self.validate(start))
            for step in life.steps(start):
                metrics = self.step(step)
                if self._validation_due(step, start):
                    metrics.update(self.validate(step))
                life.step_done(step, metrics, self._loader_state(), self.distributions)
            return life.finish()
