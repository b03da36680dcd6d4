"""The GRPO loop: one step, top to bottom, over a rollout source:

    source.next_batch (prompts -> rollout -> rewards) -> old log-probs (actor, when a batch
    feeds more than one update) -> ref log-probs (when KL is on) -> teacher log-probs (when
    distillation is on) -> advantages -> actor
    update (source.wait_update) -> source.sync (what it waits for, then Megatron -> vLLM)

The source decides when and on which weights batches are generated: trainer/sync_source.py
now, on the weights just synced; trainer/async_source.py ahead, within a staleness bound
(rl_config.async_mode). The loop holds no model and builds nothing: trainer/assemble.py makes
the run's parts (roles are Ray worker groups, mindrl/workers, the reward model the "reward"
role; the rollout engines a data-parallel group of Ray actors, mindrl/rollout; rule rewards in
the verifier process pool), trainer/lifecycle.py resumes, syncs first, saves, reports a failure
and shuts down, and the maths is mindrl/algorithms.
"""

from __future__ import annotations

import time
from typing import Dict, List

import ray
import torch

from mindrl import startup
from mindrl.algorithms import entropy_coeff_at
from mindrl.config.schema import RunConfig
from mindrl.trainer.advantage_step import advantage_fields
from mindrl.trainer.agent import episode_metrics
from mindrl.trainer.assemble import RunParts, assemble
from mindrl.trainer.async_source import AsyncSource
from mindrl.trainer.lifecycle import RunLifecycle
from mindrl.trainer.log_prob_passes import LogProbPass, run_passes, timed
from mindrl.trainer.metrics import batch_metrics, distill_metrics, perf_metrics
from mindrl.trainer.prompt_batches import image_metrics
from mindrl.trainer.route_replay_step import (OLD_ROUTES, needs_route_pass, pass_replay,
                                              records_routes, replay_metrics, update_replay)
from mindrl.trainer.sync_source import SyncSource

# The episode metrics validation logs, under its own names.
VAL_EPISODE_KEYS = {"agent/call_rate": "val/call_rate", "agent/turns_mean": "val/turns_mean",
                    "agent/env_reward_mean": "val/env_reward"}


class GRPOTrainer:
    def __init__(self, run: RunConfig, log=print):
        self.run, self.log = run, log
        self.rl, self.gen = run.rl_config, run.generate_config
        self.n = self.rl.n_samples_per_prompt
        self.parts: RunParts = None       # assembled by fit
        self.source = None                # the rollout source, made with the parts
        self.distributions: Dict[str, list] = {}   # the last step's values per sample

    # ------------------------------------------------------------------ one step

    def _log_prob_passes(self, batch_ref, step: int,
                         timings: Dict[str, float]) -> Dict[str, torch.Tensor]:
        """Old (actor), reference and teacher log-probs (trainer/log_prob_passes.py)."""
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
        if rl.uses_teacher:      # a model of its own: it never replays the actor's routes
            passes.append(LogProbPass("teacher", "teacher_log_probs",
                                      self.parts.groups["teacher"],
                                      self.run.role("teacher").micro_batch_size))
        return run_passes(passes, batch_ref, rl.blocking, timings)

    def _needs_old_log_probs(self) -> bool:
        """An old-logprob pass is redundant when each batch feeds exactly one update (unless
        routing replay r2 replays its routes or the route agreement compares them)."""
        return needs_route_pass(self.rl) or not (
            self.rl.mini_batch_size == self.run.megatron_training.global_batch_size
            and self.rl.epochs == 1)

    def step(self, step: int) -> Dict[str, float]:
        """One step: the source's next scored batch, the log-prob passes, advantages, the
        update (the source may work meanwhile), the sync (what the source waits for first)."""
        rl, parts, source = self.rl, self.parts, self.source
        prompts, actor = parts.prompts, parts.actor
        # Every phase's key is logged each step; a phase the step skips (old log-probs when
        # each batch feeds one update, ref without KL) costs 0 s.
        timings = {f"timing_s/{k}": 0.0 for k in ("old_log_prob", "ref")}
        t_step = time.perf_counter()
        batch, reward_metrics = source.next_batch(step, timings)
        scores = batch["scores"]
        batch.add(**self._log_prob_passes(ray.put(prompts.for_workers(batch)), step, timings))
        with timed(timings, "adv"):
            batch.add(**advantage_fields(batch, rl))
        entropy_coeff = entropy_coeff_at(step, rl.entropy_coeff, rl.entropy_coeff_final,
                                         rl.entropy_decay_steps)
        with timed(timings, "update_actor"):   # from the weights of step - 1's update
            if rl.skip_zero_advantage_updates and not batch["advantages"].any():
                update = {"actor/update_skipped": 1.0}     # nothing to learn from
            else:
                update = source.wait_update(actor.submit_update(
                    ray.put(prompts.for_workers(batch)), rl.mini_batch_size * self.n,
                    rl.shuffle_mini_batch, step, entropy_coeff, update_replay(rl)), step)
                update["actor/update_skipped"] = 0.0
        update["actor/entropy_coeff"] = entropy_coeff
        sync = source.sync(step, timings)
        metrics = {**batch_metrics(batch, scores, batch["finish_reason"]), **reward_metrics,
                   **image_metrics(batch), **source.version_metrics(batch, step),
                   **update, **sync, **parts.data_metrics, **timings}
        timings["timing_s/step"] = time.perf_counter() - t_step
        metrics.update(timings)
        metrics.update(perf_metrics(metrics))
        metrics.update(replay_metrics(batch, metrics))
        if rl.uses_teacher:
            metrics.update(distill_metrics(batch, rl.distill_estimator))
        if parts.agent is not None:
            metrics.update(parts.agent.metrics(batch))
            parts.agent.write_traces(step, batch, scores.tolist())
        self.distributions = source.distributions(batch, step)
        return metrics

    def validate(self, step: int) -> Dict[str, float]:
        """Score the held-out prompts with the validation sampling (greedy by default)."""
        rl, prompts = self.rl, self.parts.prompts
        self.parts.weights.settle()       # on verified weights (an async sync defers its check)
        sampler = self.source.sampler
        batch = sampler.submit(prompts.batch(self.parts.val_rows, rl.val_n_samples), seed=step,
                               routes=False, temperature=rl.val_temperature).wait()
        scores, metrics = sampler.score(batch)
        out = {"val/score": sum(scores) / len(scores)}
        out.update({"val/" + k.split("/", 1)[1]: v for k, v in metrics.items()
                    if k.split("/", 1)[1] in rl.verifier_function})
        if "critic/reward_model/mean" in metrics:
            out["val/reward_model"] = metrics["critic/reward_model/mean"]
        agent = self.parts.agent
        if agent is not None:
            episodes = episode_metrics(batch, agent.tokenizer, agent.tools is not None)
            for key, name in VAL_EPISODE_KEYS.items():
                if key in episodes:        # call_rate: tools; env_reward: an environment
                    out[name] = episodes[key]
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
        self.source = source_for(self.run)(self.run, self.parts)
        startup.started()                     # the driver's start ends (cli/train_grpo.py)
        with RunLifecycle(self.run, self.parts, self.log) as life:
            start = life.begin()
            if self._validation_due(start, start):
                self.parts.tracker.log(start, self.validate(start))
            for step in life.steps(start):
                metrics = self.step(step)
                if self._validation_due(step, start):
                    metrics.update(self.validate(step))
                life.step_done(step, metrics, self.source.loader_state(), self.distributions)
            return life.finish()


def source_for(run: RunConfig):
    """The rollout source rl_config.async_mode names."""
    return SyncSource if run.rl_config.async_mode == "off" else AsyncSource
