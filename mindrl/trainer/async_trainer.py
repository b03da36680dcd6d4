"""Asynchronous GRPO (rl_config.async_mode: one_step | bounded): the rollout engines, on
devices of their own, generate the next steps' batches while the actor trains on this one.

The loop is GRPOTrainer's step over the same assembled parts and lifecycle; what differs:

  - sampling: each step first admits what the staleness bound allows (rollout/sample_buffer.py:
    step t's batch may be submitted on weights version v while t - 1 - v <= max_staleness),
    then waits for its own batch, already submitted, and scores it. Dynamic sampling's extra
    rounds generate on the current weights, after the batches in flight;
  - the weight sync waits for every batch in flight: the engines then hold no request, so a
    sync never changes the weights under a generation (on CPU with shared weights the actor
    writes into the engine's parameters) and each sample's policy_version is the version it
    was generated with. Generation overlaps the actor's passes and update, not the sync.
    With rl_config.inflight_sync nothing waits: the engines keep decoding while the sync
    writes a second buffer and take it in between two decode steps (engines/vllm_inflight.py);
    token_policy_version says which weights sampled each token. With
    rl_config.partial_rollout_tokens (K) batches generate K tokens per sample at a time
    (rollout/partial_handle.py): the sync
    waits for the current chunk only, and the batches continue from their prefixes on the
    new weights; policy_version stays each sample's start version (what the bound counts),
    token_policy_version says which weights sampled each token;
  - the objective: with a bound above 0 rollout_is off means token, the behaviour weight of
    the decoupled objective (config/async_checks.rollout_correction). The proximal policy is
    the weights before the update: the old-log-prob pass where a batch feeds several updates,
    else the update's own detached log-probs, the same numbers (the pass plans like the
    update), so no pass is forced (docs/guides/async.md#the-objective);
  - scoring ahead: while the actor updates, the driver scores the next step's batch if the
    engines finish it first (rule verifiers only: a reward model's passes would queue behind
    the update on a shared actor; not in chunks), so the verifiers' time leaves the step;
  - a verified sync does not wait for the engines' verdict: they compare while the run goes
    on, and the actor's next update waits for it first (weight_sync/resharder.settle), so
    nothing generated on unverified weights is trained on; validation and the last step's
    sync wait for it at once;
  - checkpoints record the loader's position before the first batch not yet trained on: a
    resume generates the batches that were in flight again (nothing of the buffer is saved).

At max_staleness 0 every step admits only its own batch and waits for it at once: the
synchronous loop, step for step (tests/trainer/test_async_grpo.py).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

import torch

from mindrl.config.async_checks import staleness_bound
from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.rollout.partial import crossed_update_frac, whole_generation_versions
from mindrl.rollout.partial_handle import submit_in_chunks
from mindrl.rollout.sample_buffer import SampleBuffer
from mindrl.trainer.async_metrics import staleness_metrics, timeline_metrics
from mindrl.trainer.grpo_trainer import GRPOTrainer
from mindrl.trainer.log_prob_passes import timed
from mindrl.trainer.route_replay_step import engine_route_kwargs


class AsyncGRPOTrainer(GRPOTrainer):
    def __init__(self, run: RunConfig, log=print):
        super().__init__(run, log)
        self.bound = staleness_bound(self.rl)
        self.buffer: Optional[SampleBuffer] = None     # made at the run's first step
        self._handles: List = []                  # every batch of the current window
        self._window = {}                         # the step's times (perf_counter)
        self._chunk = self.rl.partial_rollout_tokens   # None: whole generations
        self._inflight = self.rl.inflight_sync != "off"   # syncs land between decode steps
        self._ahead: Dict[int, tuple] = {}        # step -> its batch scored during an update

    # ------------------------------------------------------------------ sampling

    def _admit(self) -> None:
        """Submit every batch the bound admits on the engines' current weights."""
        parts = self.parts
        rollout, loader, prompts = parts.rollout, parts.loader, parts.prompts
        for step in self.buffer.admissible(rollout.policy_version):
            state = loader.state_dict()
            rows = loader.next_batch()
            seed = self._seed(step, len(rows))
            batch, kwargs = prompts.batch(rows, self.n), {**prompts.rollout_kwargs,
                                                          **engine_route_kwargs(self.rl)}
            handle = (rollout.submit(batch, seed=seed, **kwargs) if self._chunk is None else
                      submit_in_chunks(rollout, batch, self._chunk, seed=seed, **kwargs))
            self.buffer.admit(step, rollout.policy_version, handle,
                              {"loader": state, "prompts": len(rows), "seed": seed})
            self._handles.append(handle)

    def _sample(self, step: int, timings: Dict[str, float]):
        if self.buffer is None or self.buffer.next_take != step:   # a fresh or resumed run
            self.buffer = SampleBuffer(self.bound, step - 1,
                                       self.run.megatron_training.train_iters)
        self._window = {"start": time.perf_counter()}
        self._handles = [a.handle for a in self.buffer.held()]
        self._admit()
        entry = self.buffer.take(step)
        with timed(timings, "gen"):               # the actor waits for its samples
            batch = entry.handle.wait()
        self._window["wait"] = timings["timing_s/gen"]
        ahead = self._ahead.pop(step, None)
        timings["timing_s/reward_ahead"] = 0.0    # scored during the last update (not a phase)
        if ahead is None:
            with timed(timings, "reward"):
                scores, metrics = self._score(batch)
        else:
            scores, metrics, timings["timing_s/reward_ahead"] = ahead
            timings["timing_s/reward"] = 0.0
        batch = batch.add(scores=torch.tensor(scores, dtype=torch.float32))
        batch, metrics = self._fill(batch, metrics, entry.extra["prompts"],
                                    entry.extra["seed"], timings)
        self._window["train"] = time.perf_counter()
        return batch, metrics

    def _update(self, refs, step: int) -> Dict[str, float]:
        """The update started; meanwhile score the next step's batch if it is done before the
        update is (the driver never makes the update wait for a generation)."""
        nxt = self._next_to_score(step + 1)
        if nxt is not None and _first_done(nxt.handle, refs, self.rl.phase_timeout_s):
            start = time.perf_counter()
            scores, metrics = self._score(nxt.handle.wait())
            self._ahead[step + 1] = (scores, metrics, time.perf_counter() - start)
        return super()._update(refs, step)

    def _next_to_score(self, step: int):
        """Step's admitted batch when it may be scored ahead: rule verifiers only, whole
        generations, not already scored."""
        if (self.parts.reward_model is not None or self._chunk is not None
                or step in self._ahead):
            return None
        return next((a for a in self.buffer.held() if a.step == step), None)

    def _generate_and_score(self, rows, seed: int, timings: Dict[str, float]):
        """Dynamic sampling's extra rounds: whole generations on the current weights. Beside
        a batch generated in chunks they carry `token_policy_version` too (each token the
        round's version), so the rounds' groups join into one batch."""
        batch, metrics = super()._generate_and_score(rows, seed, timings)
        if self._chunk is not None:
            batch = batch.add(token_policy_version=whole_generation_versions(
                batch["policy_version"], batch["response_mask"]))
        return batch, metrics

    def _sleep_engines(self) -> bool:
        """Engines on devices of their own keep their memory (a sleep would stall the
        batches they are generating)."""
        return False

    # ------------------------------------------------------------------ the sync

    def _before_sync(self, step: int, timings: Dict[str, float]) -> None:
        """Wait for every batch in flight (the sync must not change weights under them), or
        with partial rollouts for their current chunk, or with inflight_sync for nothing;
        then the step's time metrics."""
        trained = time.perf_counter()
        for entry in [] if self._inflight else self.buffer.held():
            if self._chunk is not None:
                entry.handle.pause()
            else:
                entry.handle.wait()
        end = time.perf_counter()
        timings["timing_s/drain"] = end - trained
        generating = [(h.submitted, h.finished if h.finished is not None else end)
                      for h in self._handles]
        self._window.update(timeline_metrics(
            generating, (self._window["train"], trained), (self._window["start"], end),
            self._window["wait"] + timings["timing_s/drain"]))

    def _sync_options(self, step: int) -> dict:
        """Defer the engines' check, but not the run's last (nothing follows to settle it)."""
        return {"defer_check": step < self.run.megatron_training.train_iters}

    def validate(self, step: int) -> Dict[str, float]:
        """Validation generates on the synced weights: their check decides first."""
        self.parts.weights.settle()
        return super().validate(step)

    def _after_sync(self) -> None:
        """Partial rollouts paused for the sync continue on the new weights."""
        if self._chunk is not None:
            for entry in self.buffer.held():
                entry.handle.resume()

    def _version_metrics(self, batch: Batch, step: int) -> Dict[str, float]:
        metrics = super()._version_metrics(batch, step)
        metrics.update(staleness_metrics(batch["policy_version"], step - 1))
        metrics["rollout/crossed_update_frac"] = (
            crossed_update_frac(batch["token_policy_version"], batch.trained_mask())
            if "token_policy_version" in batch else 0.0)
        metrics.update({k: v for k, v in self._window.items() if k.startswith("async/")})
        metrics["async/max_staleness"] = float(self.bound)
        return metrics

    def _version_distributions(self, batch: Batch, step: int) -> Dict[str, list]:
        """Each sample's staleness, a histogram in tensorboard (rollout/staleness)."""
        return {"rollout/staleness": (step - 1 - batch["policy_version"]).tolist()}

    def _loader_state(self) -> Optional[dict]:
        """The loader's position before the first batch drawn and not yet trained on."""
        held = self.buffer.held() if self.buffer is not None else []
        return dict(held[0].extra["loader"]) if held else None


def _first_done(handle, refs, timeout_s: float) -> bool:
    """Wait until the generate behind `handle` or every one of `refs` is done; True if the
    generate was (then or before). After timeout_s, False: the update's own wait then
    applies the phase deadline and names whoever hangs."""
    import ray

    if handle.done():
        return True
    generating, updating = list(handle.refs), list(refs)
    while True:
        generating = ray.wait(generating, num_returns=len(generating), timeout=0)[1]
        if not generating:
            return True
        updating = ray.wait(updating, num_returns=len(updating), timeout=0)[1]
        if not updating:
            return False
        if not ray.wait(generating + updating, num_returns=1, timeout=timeout_s)[0]:
            return False                          # (neither list held a ready one)


def trainer_for(run: RunConfig):
    """The loop rl_config.async_mode names."""
    return GRPOTrainer if run.rl_config.async_mode == "off" else AsyncGRPOTrainer
