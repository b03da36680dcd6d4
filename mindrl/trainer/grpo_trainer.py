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

import torch

from mindrl.algorithms import (apply_kl_penalty, compute_advantages, entropy_coeff_at,
                               scores_to_token_rewards)
from mindrl.config.schema import RunConfig
from mindrl.data.batch import PROMPT_KEYS, RESPONSE_KEYS, Batch
from mindrl.trainer.first_sync import check_first_sync, checkpoint_reference
from mindrl.trainer.metrics import (batch_metrics, console_line, perf_metrics,
                                    reward_model_metrics)
from mindrl.trainer.resume import plan_resume


@contextmanager
def timed(timings: Dict[str, float], key: str):
    """Adds the block's seconds to timing_s/KEY (a phase may run more than once a step)."""
    start = time.perf_counter()
    yield
    key = f"timing_s/{key}"
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


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

    def _role_setup(self, role: str, with_optim: bool):
        from mindrl.engines.megatron_engine import LossConfig, OptimConfig
        from mindrl.models.builder import Parallelism
        from mindrl.workers.megatron_worker import RoleSetup

        cfg, rl = self.run.role(role), self.rl
        sampling = self.gen.sampling_config
        loss = LossConfig(clip_ratio=rl.clip_ratio, clip_ratio_low=rl.clip_ratio_low,
                          clip_ratio_high=rl.clip_ratio_high, loss_agg_mode=rl.loss_agg_mode,
                          entropy_coeff=rl.entropy_coeff,
                          use_kl_loss=rl.use_kl_loss and rl.kl_coef > 0, kl_coef=rl.kl_coef,
                          kl_penalty=rl.kl_penalty, temperature=sampling.temperature)
        optim = None
        if with_optim:
            updates_per_step = (self.run.megatron_training.global_batch_size
                                // rl.mini_batch_size) * rl.epochs
            optim = OptimConfig(lr=cfg.lr, min_lr=cfg.min_lr, lr_decay_style=cfg.lr_decay_style,
                                lr_warmup_fraction=cfg.lr_warmup_fraction,
                                weight_decay=cfg.weight_decay, clip_grad=cfg.clip_grad,
                                adam_beta1=cfg.adam_beta1, adam_beta2=cfg.adam_beta2,
                                adam_eps=cfg.adam_eps,
                                train_iters=cfg.train_iters * updates_per_step,
                                use_distributed_optimizer=cfg.use_distributed_optimizer)
        return RoleSetup(
            role=role, spec=self.run.models[role],
            parallel=Parallelism(cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
                                 cfg.sequence_parallel),
            params_dtype=cfg.params_dtype, micro_batch_size=cfg.micro_batch_size, seed=cfg.seed,
            load=cfg.load, optim=optim, loss=loss, pad_id=self.pad_id,
            cpu_threads=cfg.cpu_threads)

    def _start(self) -> None:
        from transformers import AutoTokenizer

        from mindrl import device
        from mindrl.data.prompt_loader import PromptLoader
        from mindrl.data.prompt_rows import extra_keys
        from mindrl.rewards import RuleReward
        from mindrl.rollout.engine_group import RolloutGroup
        from mindrl.trainer.tracking import Tracker
        from mindrl.weight_sync.manager import WeightSync
        from mindrl.workers.placement import create_placement
        from mindrl.workers.worker_group import WorkerGroup, worker_env

        shared = self.run.megatron_training
        self.tokenizer = AutoTokenizer.from_pretrained(shared.tokenizer_name_or_path)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.extra_keys = extra_keys(shared.dataset_additional_keys)
        self.loader = PromptLoader(self._prompt_rows(shared.data_path, "prompt_rejects.jsonl"),
                                   shared.global_batch_size, seed=shared.seed)
        self.val_rows = (self._prompt_rows(self.rl.val_data_path, "val_prompt_rejects.jsonl")
                         [:self.rl.val_max_prompts] if self.rl.val_data_path else [])
        self.reward = (RuleReward(self.rl.verifier_function, self.rl.verifier_weight,
                                  verifier_timeout=self.rl.verifier_timeout,
                                  verifier_parallel=self.rl.verifier_parallel)
                       if self.rl.rule_reward else None)
        self.resume_plan = plan_resume(self.run, self.save_dir)
        slots, engine_slots = create_placement(self.run)
        self.groups: Dict[str, WorkerGroup] = {}
        setups = {"actor": self._role_setup("actor", with_optim=True)}
        for role in self.run.active_roles[1:]:   # ref, reward: forward only
            setups[role] = self._role_setup(role, with_optim=False)
        for role, setup in setups.items():
            slot = slots[role]
            world = self.run.resource(role).count
            self.groups[role] = WorkerGroup(role, world, slot.placement_group, slot.first_bundle,
                                            slot.resources_per_rank, self.rl.phase_timeout_s)
        actor_cfg = self.run.actor_config
        shared = device.weights_in_host_memory() and self.gen.cpu_weights == "shared"
        self.rollout = RolloutGroup(actor_cfg.tokenizer_name_or_path, self.gen, actor_cfg.seed,
                                    engine_slots, worker_env(),
                                    {"plain_cpu_linears": shared, "share_weights": shared},
                                    self.rl.phase_timeout_s)
        refs = {role: group.start_setup(setups[role]) for role, group in self.groups.items()}
        pids = {role: group.wait_setup(refs[role]) for role, group in self.groups.items()}
        pids["rollout"] = self.rollout.start()
        (self.run_dir / "workers.json").write_text(json.dumps(pids))   # role -> pid per rank
        self.groups["actor"].call("attach_engines", self.rollout.engines, self.rollout.nodes,
                                  self.gen.reshard_bucket_mb)
        self.weights = WeightSync(self.groups["actor"], self.gen.verify_sync)
        self.actor = self.groups["actor"]
        self.reward_model = self.groups.get("reward")
        self.tracker = Tracker(self.run_dir, self.rl.use_tensorboard, self.rl.use_wandb,
                               self.rl.wandb_project, self.rl.wandb_exp_name, self.rl.wandb_mode,
                               wandb_dir=self.rl.wandb_save_dir)

    # ------------------------------------------------------------------ checkpoints

    def _resume(self) -> int:
        if self.resume_plan is None:
            return 0
        plan = self.resume_plan
        meta = self.actor.call_rank0("load_checkpoint", str(plan.ckpt_dir), plan.parts.optimizer,
                                     plan.parts.rng)
        self.loader.load_state_dict(meta["extra"]["loader"])
        self.log(f"resumed from {plan.ckpt_dir} (step {plan.iteration}): "
                 f"{plan.parts.describe()}")
        for line in plan.lines:
            self.log(line)
        return plan.iteration

    def _save(self, step: int) -> None:
        from mindrl.ckpt.training.checkpoint_recipe import trainer_recipe
        from mindrl.ckpt.training.megatron_checkpoint import iteration_dir

        cfg = self.run.actor_config
        self.actor.call("save_checkpoint", str(self.save_dir), step,
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

    def _prompt_rows(self, path: str, rejects_name: str) -> List[dict]:
        """The source's rows with token ids and extra keys; prompts over max_prompt_length are
        skipped, counted and written to the run directory (mindrl/data/prompt_rows.py)."""
        from mindrl.data.indexed import load_prompt_rows
        from mindrl.data.prompt_rows import prepare_rows, write_rejects

        limit = self.rl.max_prompt_length
        ready = prepare_rows(load_prompt_rows(path), str(path), self.extra_keys, limit,
                             lambda text: self.tokenizer(text)["input_ids"])
        if ready.rejected:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            write_rejects(ready.rejected, str(path), limit, self.run_dir / rejects_name)
            self.log(f"{path}: {len(ready.rejected)} of {len(ready.rows) + len(ready.rejected)} "
                     f"prompts are longer than rl_config.max_prompt_length={limit} tokens and "
                     f"are skipped (rows listed in {self.run_dir / rejects_name})")
        key = "data/val_prompts_over_max_length" if "val" in rejects_name else \
            "data/prompts_over_max_length"
        self.data_metrics[key] = float(len(ready.rejected))
        return ready.rows

    def _prompt_batch(self, rows: List[dict], n: int) -> Batch:
        from mindrl.data.prompt_rows import per_prompt_fields

        return Batch.from_prompts([r["prompt_ids"] for r in rows], n, self.pad_id,
                                  **per_prompt_fields(rows, self.extra_keys))

    def _generate_and_score(self, rows: List[dict], seed: int, timings: Dict[str, float]):
        with timed(timings, "gen"):
            with self._training_state_offloaded():
                batch = self.rollout.generate(self._prompt_batch(rows, self.n), seed=seed)
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
            model_scores = self.reward_model.call_rank0(
                "compute_scores", batch.tensor_fields(PROMPT_KEYS + RESPONSE_KEYS),
                self.run.reward_config.micro_batch_size)
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
        from mindrl.trainer.dynamic_sampling import informative_groups, select_groups

        pools = ([], [])   # (batch, group id): informative, not
        rounds, generated = 0, []
        while True:
            rounds += 1
            generated += batch["scores"].tolist()
            keep = set(informative_groups(batch["scores"].tolist(),
                                          batch["group_id"].tolist()))
            for g in batch.group_ids:
                pools[0 if g in keep else 1].append((batch, g))
            if len(pools[0]) >= len(rows) or rounds >= self.rl.max_gen_rounds:
                break
            batch, _ = self._generate_and_score(self.loader.next_batch(),
                                                seed + rounds * 1_000_003, timings)
        chosen = select_groups(pools[0], pools[1], len(rows))
        metrics = {**metrics, "dynamic_sampling/rounds": float(rounds),
                   "dynamic_sampling/informative_groups": float(len(pools[0])),
                   "dynamic_sampling/raw_score_mean": sum(generated) / len(generated)}
        return Batch.concat([b.select_groups([g]) for b, g in chosen],
                            renumber_groups=True), metrics

    def _log_prob_passes(self, batch_ref, timings: Dict[str, float]) -> Dict[str, torch.Tensor]:
        """Old (actor) and reference log-probs. They read the same batch and run on different
        workers: with rl_config.blocking false both are in flight at once."""
        rl = self.rl
        passes = []   # (timing key, output field, group, micro batch size)
        if self._needs_old_log_probs():
            passes.append(("old_log_prob", "old_log_probs", self.actor,
                           rl.actor_forward_micro_batch_size
                           or self.run.actor_config.micro_batch_size))
        if rl.uses_reference:
            passes.append(("ref", "ref_log_probs", self.groups["ref"],
                           rl.ref_forward_micro_batch_size
                           or self.run.ref_config.micro_batch_size))
        out: Dict[str, torch.Tensor] = {}
        if rl.blocking:
            for key, field_name, group, mbs in passes:
                with timed(timings, key):
                    out[field_name] = group.call_rank0("compute_log_probs", batch_ref,
                                                       mbs)["log_probs"]
            return out
        start = time.perf_counter()
        pending = [(key, field_name, group, group.submit("compute_log_probs", batch_ref, mbs))
                   for key, field_name, group, mbs in passes]
        spans = []
        for key, field_name, group, refs in pending:
            result = group.wait(refs, "compute_log_probs")[0]
            out[field_name] = result["log_probs"]
            spans.append(result["span"])
            timings[f"timing_s/{key}"] = time.perf_counter() - start   # until it was ready
        if len(spans) == 2:   # seconds both passes were running at once
            timings["timing_s/log_prob_overlap"] = max(
                0.0, min(spans[0][1], spans[1][1]) - max(spans[0][0], spans[1][0]))
        return out

    @contextmanager
    def _training_state_offloaded(self):
        """Colocated actor + rollout: move what generate_config.offload_train_* names to host
        memory while vLLM generates, and back before the next Megatron pass."""
        g = self.gen
        flags = (g.offload_train_param, g.offload_train_grad, g.offload_train_optimizer)
        if not any(flags):
            yield
            return
        self.actor.call("offload", *flags)
        try:
            yield
        finally:
            self.actor.call("onload")

    def _needs_old_log_probs(self) -> bool:
        """An old-logprob pass is redundant when each batch feeds exactly one update."""
        return not (self.rl.mini_batch_size == self.run.megatron_training.global_batch_size
                    and self.rl.epochs == 1)

    def step(self, step: int) -> Dict[str, float]:
        import ray

        rl = self.rl
        # Every phase's key is logged each step; a phase the step skips (old log-probs when
        # each batch feeds one update, ref without KL) costs 0 s.
        timings = {f"timing_s/{k}": 0.0 for k in ("old_log_prob", "ref")}
        t_step = time.perf_counter()
        batch, reward_metrics = self._sample(step, timings)
        slept = self.rollout.sleep()          # device memory to the actor until the sync
        scores = batch["scores"]
        batch.add(**self._log_prob_passes(ray.put(batch.tensor_fields()), timings))
        with timed(timings, "adv"):
            mask = batch["response_mask"]
            token_rewards = scores_to_token_rewards(scores, mask)
            if rl.uses_reference and not rl.use_kl_loss:
                token_rewards = apply_kl_penalty(token_rewards, batch["old_log_probs"]
                                                 if "old_log_probs" in batch
                                                 else batch["rollout_log_probs"],
                                                 batch["ref_log_probs"], rl.kl_coef,
                                                 rl.kl_penalty, mask)
            advantages, _ = compute_advantages(rl.adv_estimator, scores=scores,
                                               token_rewards=token_rewards, response_mask=mask,
                                               group_id=batch["group_id"], gamma=rl.gamma,
                                               lam=rl.lam)
            batch.add(token_rewards=token_rewards, advantages=advantages)
        entropy_coeff = entropy_coeff_at(step, rl.entropy_coeff, rl.entropy_coeff_final,
                                         rl.entropy_decay_steps)
        with timed(timings, "update_actor"):
            update = self.actor.call_rank0("update", ray.put(batch.tensor_fields()),
                                           rl.mini_batch_size * self.n,
                                           rl.shuffle_mini_batch, step, entropy_coeff)
        update["actor/entropy_coeff"] = entropy_coeff
        with timed(timings, "reshard"):
            self.rollout.wake(["weights"])
            sync = self.weights.sync(after_discarded_weights=slept and self.gen.sleep_level == 2)
            self.rollout.wake(["kv_cache"])
        metrics = {**batch_metrics(batch, scores, batch["finish_reason"]), **reward_metrics,
                   **update, **sync, **self.data_metrics, **timings}
        timings["timing_s/step"] = time.perf_counter() - t_step
        metrics.update(timings)
        metrics.update(perf_metrics(metrics["perf/total_num_tokens"], timings["timing_s/step"]))
        return metrics

    def validate(self, step: int) -> Dict[str, float]:
        """Score the held-out prompts with the validation sampling (greedy by default)."""
        rl = self.rl
        batch = self.rollout.generate(self._prompt_batch(self.val_rows, rl.val_n_samples),
                                      temperature=rl.val_temperature, seed=step)
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
        from tqdm import tqdm

        from mindrl.errors import PhaseTimeout, WorkerDied
        from mindrl.trainer.failure_report import report_failure

        self._start()
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
            log_interval = self.run.actor_config.log_interval
            bar = tqdm(range(start + 1, total + 1), initial=start, total=total, desc="GRPO",
                       dynamic_ncols=True)
            if self._validation_due(start, start):
                self.tracker.log(start, self.validate(start))
            for step in bar:
                self.at_step = step
                metrics = self.step(step)
                if self._validation_due(step, start):
                    metrics.update(self.validate(step))
                self.tracker.log(step, metrics)
                if step % log_interval == 0 or step == total:
                    bar.write(console_line(step, total, metrics))
                bar.set_postfix(score=f"{metrics['critic/score/mean']:.3f}",
                                len=f"{metrics['response_length/mean']:.1f}",
                                s=f"{metrics['timing_s/step']:.2f}")
                if save_freq and (step % save_freq == 0 or step == total):
                    self._save(step)
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
