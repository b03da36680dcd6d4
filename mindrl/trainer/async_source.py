"""The asynchronous rollout source (rl_config.async_mode: one_step | bounded): the engines, on
devices of their own, generate the next steps' batches while the actor trains on this one.
It answers the step's questions as the synchronous source does (trainer/sync_source.py);
what differs:

  - the next batch: each step first admits what the staleness bound allows
    (rollout/sample_buffer.py: step t's batch may be submitted on weights version v while
    t - 1 - v <= max_staleness), then waits for its own batch, already submitted, and scores
    it. Dynamic sampling's extra rounds generate on the current weights, after the batches in
    flight;
  - what the weight sync waits for: every batch in flight, so a sync never changes the
    weights under a generation (on CPU with shared weights the actor writes into the engine's
    parameters) and each sample's policy_version is the version it was generated with.
    Generation overlaps the actor's passes and update, not the sync. With
    rl_config.inflight_sync nothing waits: the engines keep decoding while the sync writes a
    second buffer and take it in between two decode steps (engines/vllm_inflight.py);
    token_policy_version says which weights sampled each token. With
    rl_config.partial_rollout_tokens (K) batches generate K tokens per sample at a time
    (rollout/partial_handle.py): the sync waits for the current chunk only, and the batches
    continue from their prefixes on the new weights; policy_version stays each sample's
    start version (what the bound counts), token_policy_version says which weights sampled
    each token;
  - during the update: the source scores the next step's batch if the engines finish it
    first (rule verifiers only: a reward model's passes would queue behind the update on a
    shared actor; not in chunks), so the verifiers' time leaves the step;
  - a verified sync does not wait for the engines' verdict: they compare while the run goes
    on, and the actor's next update waits for it first (weight_sync/resharder.settle), so
    nothing generated on unverified weights is trained on; validation and the last step's
    sync wait for it at once;
  - checkpoints record the loader's position before the first batch not yet trained on: a
    resume generates the batches that were in flight again (nothing of the buffer is saved).

The objective: with a bound above 0 rollout_is off means token, the behaviour weight of the
decoupled objective (config/checks/asynchronous.rollout_correction); the proximal policy is the
weights before the update (docs/guides/async.md#the-objective).

At max_staleness 0 every step admits only its own batch and waits for it at once: the
synchronous source, step for step (tests/trainer/test_async_grpo.py,
tests/trainer/test_step_golden.py).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from mindrl.config.checks.asynchronous import staleness_bound
from mindrl.config.schema import RunConfig
from mindrl.data.batch import Batch
from mindrl.rollout.partial import crossed_update_frac, whole_generation_versions
from mindrl.rollout.sample_buffer import SampleBuffer
from mindrl.trainer.async_metrics import staleness_metrics, timeline_metrics
from mindrl.trainer.log_prob_passes import timed
from mindrl.trainer.metrics import policy_version_metrics
from mindrl.trainer.sampling import Sampler, with_scores


class AsyncSource:
    def __init__(self, run: RunConfig, parts):
        self.run, self.parts, self.rl = run, parts, run.rl_config
        self.sampler = Sampler(run, parts)
        self.bound = staleness_bound(self.rl)
        self.buffer: Optional[SampleBuffer] = None     # made at the run's first step
        self._handles: List = []                  # every batch of the current window
        self._window = {}                         # the step's times (perf_counter)
        self._chunk = self.rl.partial_rollout_tokens   # None: whole generations
        self._inflight = self.rl.inflight_sync != "off"   # syncs land between decode steps
        self._ahead: Dict[int, tuple] = {}        # step -> its batch scored during an update

    # ------------------------------------------------------------------ the next batch

    def _admit(self) -> None:
        """Submit every batch the bound admits on the engines' current weights."""
        rollout, loader, prompts = self.parts.rollout, self.parts.loader, self.parts.prompts
        for step in self.buffer.admissible(rollout.policy_version):
            state = loader.state_dict()
            rows = loader.next_batch()
            seed = self.sampler.seed(step, len(rows))
            handle = self.sampler.submit(prompts.batch(rows, self.sampler.n), seed, self._chunk)
            self.buffer.admit(step, rollout.policy_version, handle,
                              {"loader": state, "prompts": len(rows), "seed": seed})
            self._handles.append(handle)

    def next_batch(self, step: int, timings: Dict[str, float]):
        """Step's batch, admitted earlier (or now), waited for and scored (or taken as scored
        during the last update), topped up by dynamic sampling's fresh rounds. The engines
        keep their memory: a sleep would stall the batches they are generating."""
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
                scores, metrics = self.sampler.score(batch)
        else:
            scores, metrics, timings["timing_s/reward_ahead"] = ahead
            timings["timing_s/reward"] = 0.0
        batch, metrics = self.sampler.fill(with_scores(batch, scores), metrics,
                                           entry.extra["prompts"], entry.extra["seed"],
                                           timings, self._fresh_round)
        self._window["train"] = time.perf_counter()
        return batch, metrics

    def _fresh_round(self, rows, seed: int, timings: Dict[str, float]):
        """Dynamic sampling's extra rounds: whole generations on the current weights. Beside
        a batch generated in chunks they carry `token_policy_version` too (each token the
        round's version), so the rounds' groups join into one batch."""
        batch, metrics = self.sampler.generate_and_score(rows, seed, timings)
        if self._chunk is not None and "token_policy_version" not in batch:
            batch = batch.add(token_policy_version=whole_generation_versions(
                batch["policy_version"], batch["response_mask"]))
        return batch, metrics

    # ------------------------------------------------------------------ during the update

    def wait_update(self, refs, step: int) -> Dict[str, float]:
        """The update started; meanwhile score the next step's batch if it is done before the
        update is (the source never makes the update wait for a generation)."""
        nxt = self._next_to_score(step + 1)
        if nxt is not None and _first_done(nxt.handle, refs, self.rl.phase_timeout_s):
            start = time.perf_counter()
            scores, metrics = self.sampler.score(nxt.handle.wait())
            self._ahead[step + 1] = (scores, metrics, time.perf_counter() - start)
        return self.parts.actor.wait_update(refs)

    def _next_to_score(self, step: int):
        """Step's admitted batch when it may be scored ahead: rule verifiers only, whole
        generations, not already scored."""
        if (self.parts.reward_model is not None or self._chunk is not None
                or step in self._ahead):
            return None
        return next((a for a in self.buffer.held() if a.step == step), None)

    # ------------------------------------------------------------------ the sync

    def sync(self, step: int, timings: Dict[str, float]) -> Dict[str, float]:
        """Wait for every batch in flight (the sync must not change weights under them), or
        with partial rollouts for their current chunk, or with inflight_sync for nothing;
        sync with the engines' check deferred (but not the run's last: nothing follows to
        settle it); then partial rollouts paused for it continue on the new weights."""
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
        with timed(timings, "reshard"):
            sync = self.parts.sync_weights(
                step, after_discarded_weights=False,
                defer_check=step < self.run.megatron_training.train_iters)
        if self._chunk is not None:
            for entry in self.buffer.held():
                entry.handle.resume()
        return sync

    # ------------------------------------------------------------------ what it reports

    def version_metrics(self, batch: Batch, step: int) -> Dict[str, float]:
        metrics = policy_version_metrics(batch, step - 1)
        metrics.update(staleness_metrics(batch["policy_version"], step - 1))
        metrics["rollout/crossed_update_frac"] = (
            crossed_update_frac(batch["token_policy_version"], batch.trained_mask())
            if "token_policy_version" in batch else 0.0)
        metrics.update({k: v for k, v in self._window.items() if k.startswith("async/")})
        metrics["async/max_staleness"] = float(self.bound)
        return metrics

    def distributions(self, batch: Batch, step: int) -> Dict[str, list]:
        """Each sample's staleness, a histogram in tensorboard (rollout/staleness)."""
        return {"rollout/staleness": (step - 1 - batch["policy_version"]).tolist()}

    def loader_state(self) -> Optional[dict]:
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
