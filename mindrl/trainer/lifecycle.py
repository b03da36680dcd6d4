"""A run's life around its loop: resume, the first weight sync (checked against the checkpoint
on a fresh run), each step's record and save, and at the end the failure report and shutdown.

A loop (trainer/grpo_trainer.py) is a `with RunLifecycle(...) as life:` block over the
assembled parts (trainer/assemble.py): `begin()` gives the step to start after, `steps()` the
steps to run, `step_done()` logs, warns, shows progress and saves, `finish()` the history. A
member that dies or misses the phase deadline leaves a failure report
(trainer/failure_report.py) and every worker is then ended at once; any other way out ends them
gracefully. A rerun resumes from the latest complete checkpoint in actor_config.save (model,
optimizer, RNG, data position).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

from mindrl.ckpt.training.checkpoint_recipe import trainer_recipe
from mindrl.ckpt.training.megatron_checkpoint import iteration_dir
from mindrl.config.schema import RunConfig
from mindrl.errors import PhaseTimeout, WorkerDied
from mindrl.trainer.assemble import RunParts
from mindrl.trainer.failure_report import report_failure
from mindrl.trainer.first_sync import check_first_sync, checkpoint_reference
from mindrl.trainer.metrics import warn_on_drift
from mindrl.trainer.progress import StepProgress


class RunLifecycle:
    def __init__(self, run: RunConfig, parts: RunParts, log: Callable[[str], None] = print):
        self.run, self.parts, self.log = run, parts, log
        self.run_dir = Path(run.run_dir)
        self.total = run.megatron_training.train_iters
        self.save_freq = run.rl_config.save_freq or run.megatron_training.save_interval
        self.at_step = 0                  # the step under way, named by a failure report
        self.progress = None

    def __enter__(self) -> "RunLifecycle":
        return self

    # ------------------------------------------------------------------ start

    def begin(self) -> int:
        """Resume (the step the run starts after: 0 when fresh), drop metric rows a crash
        lost, and sync the engines to the actor's exact weights (the first sync of a fresh
        run checked against the checkpoint both sides loaded: trainer/first_sync.py)."""
        parts = self.parts
        start = self.at_step = self._resume()
        parts.tracker.rewind(start)        # drop rows of steps a crash lost
        engines = parts.rollout.engines
        reference = checkpoint_reference(self.run, engines, self.log) if start == 0 else None
        parts.sync_weights(start)          # vLLM starts from the actor's exact weights
        if reference is not None:
            check_first_sync(reference, engines, self.run.actor_config.tokenizer_name_or_path)
        self.progress = StepProgress(start, self.total, self.run.actor_config.log_interval,
                                     self.log)
        return start

    def _resume(self) -> int:
        plan = self.parts.resume_plan
        if plan is None:
            return 0
        meta = self.parts.actor.load_checkpoint(str(plan.ckpt_dir), plan.parts.optimizer,
                                                plan.parts.rng)
        self.parts.loader.load_state_dict(meta["extra"]["loader"])
        self.log(f"resumed from {plan.ckpt_dir} (step {plan.iteration}): "
                 f"{plan.parts.describe()}")
        for line in plan.lines:
            self.log(line)
        return plan.iteration

    # ------------------------------------------------------------------ steps

    def steps(self, start: int) -> Iterator[int]:
        """The steps after `start` up to megatron_training.train_iters."""
        for step in range(start + 1, self.total + 1):
            self.at_step = step
            yield step

    def step_done(self, step: int, metrics: Dict[str, float],
                  loader_state: Optional[dict] = None,
                  distributions: Optional[Dict[str, list]] = None) -> None:
        """Log the step's metrics, warn on vLLM-vs-actor drift, show progress, save when due
        (rl_config.save_freq, else megatron_training.save_interval, and the last step).
        loader_state: the loader's position to save instead of its own (a loop that drew
        prompts ahead of this step: a resume draws them again); distributions: values per
        sample, logged as histograms (Tracker.log)."""
        tracker = self.parts.tracker
        tracker.log(step, metrics, distributions)
        warn_on_drift(tracker.history, self.run.rl_config, self.log)   # vLLM vs actor
        self.progress.step_done(step, metrics)
        if self.save_freq and (step % self.save_freq == 0 or step == self.total):
            self.save(step, loader_state)

    def save(self, step: int, loader_state: Optional[dict] = None) -> None:
        """The actor's checkpoint with the loader's position (`loader_state`, else the
        loader's own); older ones beyond rl_config.save_limit removed."""
        cfg, parts = self.run.actor_config, self.parts
        loader = parts.loader.state_dict() if loader_state is None else loader_state
        parts.actor.save_checkpoint(str(parts.save_dir), step,
                                    {"loader": loader, "step": step,
                                     "recipe": trainer_recipe(self.run)},
                                    not cfg.no_save_optim, not cfg.no_save_rng)
        limit = self.run.rl_config.save_limit
        if limit:
            kept = sorted(parts.save_dir.glob("iter_*"))
            for old in kept[:-limit]:
                if old != iteration_dir(parts.save_dir, step):
                    shutil.rmtree(old, ignore_errors=True)

    def finish(self) -> List[Dict[str, float]]:
        """Every logged row, after the progress display closes."""
        self.progress.close()
        return self.parts.tracker.history

    # ------------------------------------------------------------------ end

    def __exit__(self, exc_type, exc, tb) -> bool:
        failed = isinstance(exc, (WorkerDied, PhaseTimeout))   # a stuck member is never awaited
        try:
            if failed:
                parts = self.parts
                report_failure(exc, [*parts.groups.values(), parts.rollout], self.at_step,
                               self.run.rl_config.phase_timeout_s, self.run_dir, self.log)
        finally:
            self.shutdown(graceful=not failed)
        return False

    def shutdown(self, graceful: bool = True) -> None:
        """The reward curve and tracker closed, the verifier and tool pools, every role and engine
        ended (at once after a failure: a stuck member would never answer)."""
        parts = self.parts
        png = parts.tracker.reward_curve()
        parts.tracker.close()
        if parts.reward is not None:
            parts.reward.close()
        if parts.agent is not None:
            parts.agent.close()
        for group in parts.groups.values():
            group.shutdown(graceful=graceful)
        if parts.rollout is not None:
            parts.rollout.shutdown(graceful=graceful)
        if png is not None:
            self.log(f"reward curve: {png}")
        self.log(f"tensorboard events: {self.run_dir / 'tensorboard'}")
