"""The GRPO driver, one step top to bottom:

    prompts -> rollout (the vLLM engine group) -> rewards (rule verifiers and / or the reward
    model) -> old log-probs (actor, when a batch feeds more than one update) -> ref
    log-probs (when KL is on) -> advantages -> actor update -> reshard (Megatron -> vLLM)

The driver holds no model: roles are Ray worker groups (mindrl/workers; the reward model is
the "reward" role), the rollout engines a data-parallel group of Ray actors on the actor's
devices (mindrl/rollout), rule rewards run in the verifier process pool, the maths is
mindrl/algorithms. A rerun resumes from the latest complete checkpoint in actor_config.save
(model, optimizer, RNG, data position).
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Tuple

import ray
import torch

from mindrl import device, startup
from mindrl.algorithms import entropy_coeff_at
from mindrl.ckpt.training.checkpoint_recipe import trainer_recipe
from mindrl.ckpt.training.megatron_checkpoint import iteration_dir
from mindrl.config.roles import role_setup
from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.data.prompt_loader import PromptLoader
from mindrl.data.prompt_rows import extra_keys
from mindrl.errors import PhaseTimeout, WorkerDied
from mindrl.rewards import RuleReward
from mindrl.rollout.engine_group import RolloutGroup
from mindrl.trainer.advantage_step import advantage_fields
from mindrl.trainer.dynamic_sampling import sample_informative
from mindrl.trainer.failure_report import report_failure
from mindrl.trainer.first_sync import check_first_sync, checkpoint_reference
from mindrl.trainer.log_prob_passes import LogProbPass, run_passes, timed
from mindrl.trainer.metrics import batch_metrics, perf_metrics, reward_model_metrics, warn_on_drift
from mindrl.trainer.progress import StepProgress
from mindrl.trainer.prompt_batches import PromptBatches, image_metrics
from mindrl.trainer.resume import plan_resume
from mindrl.trainer.tracking import Tracker
from mindrl.weight_sync.manager import WeightSync
from mindrl.workers.placement import create_placement
from mindrl.workers.worker_group import ROLE_GROUPS, ActorGroup, RoleGroup, worker_env


class GRPOTrainer:
    def __init__(self, run: RunConfig, log=print):
        self.run, self.log = run, log
        self.rl, self.gen = run.rl_config, run.generate_config
        self.n = self.rl.n_samples_per_prompt
        self.run_dir = Path(run.run_dir)
        self.save_dir = Path(run.actor_config.save or self.run_dir / "checkpoints")
        self.groups, self.rollout = {}, None
        self.data_metrics: Dict[str, float] = {}

    # ------------------------------------------------------------------ setup

    def _start(self) -> None:
        shared = self.run.megatron_training
        self.prompts = PromptBatches.for_model(
            shared.tokenizer_name_or_path, self.run.models.get("actor"),
            extra_keys(shared.dataset_additional_keys), self.rl.max_prompt_length,
            self.run.pixel_dtype)
        self.tokenizer, self.pad_id, self.extra_keys = (
            self.prompts.tokenizer, self.prompts.pad_id, self.prompts.extra_keys)
        self.loader = PromptLoader(
            self._prompt_rows(shared.data_path, "prompt_rejects.jsonl",
                              "data/prompts_over_max_length"),
            shared.global_batch_size, seed=shared.seed)
        self.val_rows = (self._prompt_rows(self.rl.val_data_path, "val_prompt_rejects.jsonl",
                                           "data/val_prompts_over_max_length")
                         [:self.rl.val_max_prompts] if self.rl.val_data_path else [])
        self.reward = (RuleReward(self.rl.verifier_function, self.rl.verifier_weight,
                                  verifier_timeout=self.rl.verifier_timeout,
                                  verifier_parallel=self.rl.verifier_parallel)
                       if self.rl.rule_reward else None)
        self.resume_plan = plan_resume(self.run, self.save_dir)
        slots, engine_slots = create_placement(self.run)
        setups = {role: role_setup(self.run, role, self.pad_id) for role in self.run.active_roles}
        self.groups: Dict[str, RoleGroup] = {
            role: ROLE_GROUPS[role](role, self.run.resource(role).count,
                                    slots[role].placement_group, slots[role].first_bundle,
                                    slots[role].resources_per_rank, self.rl.phase_timeout_s)
            for role in setups}
        actor_cfg = self.run.actor_config
        shared = device.weights_in_host_memory() and self.gen.cpu_weights == "shared"
        self.rollout = RolloutGroup(actor_cfg.tokenizer_name_or_path, self.gen, actor_cfg.seed,
                                    engine_slots, worker_env(),
                                    {"plain_cpu_linears": shared, "share_weights": shared,
                                     "actor_dtype": actor_cfg.params_dtype},
                                    self.rl.phase_timeout_s)
        refs = {role: group.start_setup(setups[role]) for role, group in self.groups.items()}
        pids = {role: group.wait_setup(refs[role]) for role, group in self.groups.items()}
        pids["rollout"] = self.rollout.start()
        (self.run_dir / "workers.json").write_text(json.dumps(pids))   # role -> pid per rank
        self.actor: ActorGroup = self.groups["actor"]
        self.actor.attach_engines(self.rollout.engines, self.rollout.nodes,
                                  self.gen.reshard_bucket_mb)
        self.weights = WeightSync(self.actor, self.gen.verify_sync)
        self.reward_model = self.groups.get("reward")
        self.tracker = Tracker(self.run_dir, self.rl.use_tensorboard, self.rl.use_wandb,
                               self.rl.wandb_project, self.rl.wandb_exp_name, self.rl.wandb_mode,
                               wandb_dir=self.rl.wandb_save_dir)

    # ------------------------------------------------------------------ checkpoints

    def _resume(self) -> int:
        if self.resume_plan is None:
            return 0
        plan = self.resume_plan
        meta = self.actor.load_checkpoint(str(plan.ckpt_dir), plan.parts.optimizer,
                                          plan.parts.rng)
        self.loader.load_state_dict(meta["extra"]["loader"])
        self.log(f"resumed from {plan.ckpt_dir} (step {plan.iteration}): "
                 f"{plan.parts.describe()}")
        for line in plan.lines:
            self.log(line)
        return plan.iteration

    def _save(self, step: int) -> None:
        cfg = self.run.actor_config
        self.actor.save_checkpoint(str(self.save_dir), step,
                                   {"loader": self.loader.state_dict(), "step": step,
                                    "recipe": trainer_recipe(self.run)},
                                   not cfg.no_save_optim, not cfg.no_save_rng)
        limit = self.rl.save_limit
        if limit:
            kept = sorted(self.save_dir.glob("iter_*"))
            for old in kept[:-limit]:
                if old != iteration_dir(self.save_dir, step):
                    shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------ one step

    def _prompt_rows(self, path: str, rejects_name: str, metric: str) -> List[dict]:
        """Token ids and extra keys; overlong prompts skipped, counted and listed in the run
        directory (trainer/prompt_batches.py)."""
        rows, self.data_metrics[metric] = self.prompts.rows(path, self.run_dir / rejects_name,
                                                            self.log)
        return rows

    def _generate_and_score(self, rows: List[dict], seed: int, timings: Dict[str, float]):
        with timed(timings, "gen"):
            with self._training_state_offloaded():
                batch = self.rollout.generate(self.prompts.batch(rows, self.n), seed=seed,
                                              **self.prompts.rollout_kwargs)
        with timed(timings, "reward"):
            scores, metrics = self._score(batch)
        return batch.add(scores=torch.tensor(scores, dtype=torch.float32)), metrics

    def _score(self, batch: Batch) -> Tuple[List[float], Dict[str, float]]:
        """Per sample: rule score (weighted verifiers) + reward_model_weight x reward-model
        score, each part present when its rl_config switch is on. Verifiers get the label and
        the dataset's additional keys as keywords."""
        scores, metrics = [0.0] * len(batch), {}
        if self.reward is not None:
            texts = self.tokenizer.batch_decode(batch.response_lists(), skip_special_tokens=True)
            extras = [{k: batch[k][i] for k in self.extra_keys} for i in range(len(batch))]
            scores, metrics = self.reward.score(texts, batch["label"], extras)
        if self.reward_model is not None:
            model_scores = self.reward_model.compute_scores(ray.put(
                self.prompts.for_workers(batch)), self.run.reward_config.micro_batch_size)
            metrics = {**metrics, **reward_model_metrics(model_scores)}
            weight = self.rl.reward_model_weight
            scores = [s + weight * m for s, m in zip(scores, model_scores.tolist())]
        return scores, metrics

    def _sample(self, step: int, timings: Dict[str, float]):
        """One batch of rollouts with their scores; with rl_config.dynamic_sampling, only
        groups whose samples disagree (DAPO), generating more prompts as needed."""
        rows = self.loader.next_batch()
        seed = (self.gen.sampling_config.seed or 0) + step * len(rows) * self.n
        batch, metrics = self._generate_and_score(rows, seed, timings)
        if not self.rl.dynamic_sampling:
            return batch, metrics
        return sample_informative(
            batch, metrics, len(rows), self.rl.max_gen_rounds,
            lambda r: self._generate_and_score(self.loader.next_batch(), seed + r * 1_000_003,
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
            passes.append(LogProbPass("old_log_prob", "old_log_probs", self.actor,
                                      rl.actor_forward_micro_batch_size
                                      or self.run.actor_config.micro_batch_size, like_update))
        if rl.uses_reference:
            passes.append(LogProbPass("ref", "ref_log_probs", self.groups["ref"],
                                      rl.ref_forward_micro_batch_size
                                      or self.run.ref_config.micro_batch_size))
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
        self.actor.offload(*flags)
        try:
            yield
        finally:
            self.actor.onload()

    def _needs_old_log_probs(self) -> bool:
        """An old-logprob pass is redundant when each batch feeds exactly one update."""
        return not (self.rl.mini_batch_size == self.run.megatron_training.global_batch_size
                    and self.rl.epochs == 1)

    def step(self, step: int) -> Dict[str, float]:
        rl = self.rl
        # Every phase's key is logged each step; a phase the step skips (old log-probs when
        # each batch feeds one update, ref without KL) costs 0 s.
        timings = {f"timing_s/{k}": 0.0 for k in ("old_log_prob", "ref")}
        t_step = time.perf_counter()
        batch, reward_metrics = self._sample(step, timings)
        slept = self.rollout.sleep()          # device memory to the actor until the sync
        scores = batch["scores"]
        batch.add(**self._log_prob_passes(ray.put(self.prompts.for_workers(batch)), step,
                                          timings))
        with timed(timings, "adv"):
            batch.add(**advantage_fields(batch, rl))
        entropy_coeff = entropy_coeff_at(step, rl.entropy_coeff, rl.entropy_coeff_final,
                                         rl.entropy_decay_steps)
        with timed(timings, "update_actor"):
            update = self.actor.update(ray.put(self.prompts.for_workers(batch)),
                                       rl.mini_batch_size * self.n, rl.shuffle_mini_batch,
                                       step, entropy_coeff)
        update["actor/entropy_coeff"] = entropy_coeff
        with timed(timings, "reshard"):
            self.rollout.wake(["weights"])
            sync = self.weights.sync(after_discarded_weights=slept and self.gen.sleep_level == 2)
            self.rollout.wake(["kv_cache"])
        metrics = {**batch_metrics(batch, scores, batch["finish_reason"]), **reward_metrics,
                   **image_metrics(batch),
                   **update, **sync, **self.data_metrics, **timings}
        timings["timing_s/step"] = time.perf_counter() - t_step
        metrics.update(timings)
        metrics.update(perf_metrics(metrics))
        return metrics

    def validate(self, step: int) -> Dict[str, float]:
        """Score the held-out prompts with the validation sampling (greedy by default)."""
        rl = self.rl
        batch = self.rollout.generate(self.prompts.batch(self.val_rows, rl.val_n_samples),
                                      temperature=rl.val_temperature, seed=step,
                                      **self.prompts.rollout_kwargs)
        scores, metrics = self._score(batch)
        out = {"val/score": sum(scores) / len(scores)}
        out.update({"val/" + k.split("/", 1)[1]: v for k, v in metrics.items()
                    if k.split("/", 1)[1] in rl.verifier_function})
        if "critic/reward_model/mean" in metrics:
            out["val/reward_model"] = metrics["critic/reward_model/mean"]
        return out

    def _validation_due(self, step: int, start: int) -> bool:
        if not self.val_rows:
            return False
        if step == start:   # before the first step of this run; a resumed run already has it
            return self.rl.val_before_train and start == 0
        freq = self.rl.val_freq
        return bool(freq) and (step % freq == 0 or step == self.run.megatron_training.train_iters)

    # ------------------------------------------------------------------ loop

    def fit(self) -> List[Dict[str, float]]:
        self._start()
        startup.started()                     # the driver's start ends (cli/train_grpo.py)
        self.at_step, failed = 0, False
        try:
            start = self.at_step = self._resume()
            self.tracker.rewind(start)        # drop rows of steps a crash lost
            reference = (checkpoint_reference(self.run, self.rollout.engines, self.log)
                         if start == 0 else None)
            self.weights.sync()               # vLLM starts from the actor's exact weights
            if reference is not None:
                check_first_sync(reference, self.rollout.engines,
                                 self.run.actor_config.tokenizer_name_or_path)
            total = self.run.megatron_training.train_iters
            save_freq = self.rl.save_freq or self.run.megatron_training.save_interval
            progress = StepProgress(start, total, self.run.actor_config.log_interval, self.log)
            if self._validation_due(start, start):
                self.tracker.log(start, self.validate(start))
            for step in range(start + 1, total + 1):
                self.at_step = step
                metrics = self.step(step)
                if self._validation_due(step, start):
                    metrics.update(self.validate(step))
                self.tracker.log(step, metrics)
                warn_on_drift(self.tracker.history, self.rl, self.log)   # vLLM vs actor
                progress.step_done(step, metrics)
                if save_freq and (step % save_freq == 0 or step == total):
                    self._save(step)
            progress.close()
            return self.tracker.history
        except (WorkerDied, PhaseTimeout) as e:   # a stuck member is killed, never awaited
            failed = True
            report_failure(e, [*self.groups.values(), self.rollout], self.at_step,
                           self.rl.phase_timeout_s, self.run_dir, self.log)
            raise
        finally:
            png = self.tracker.reward_curve()
            self.tracker.close()
            if self.reward is not None:
                self.reward.close()
            for group in self.groups.values():
                group.shutdown(graceful=not failed)
            if self.rollout is not None:
                self.rollout.shutdown(graceful=not failed)
            if png is not None:
                self.log(f"reward curve: {png}")
            self.log(f"tensorboard events: {self.run_dir / 'tensorboard'}")
