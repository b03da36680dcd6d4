"""A submitted generate that runs in chunks (rl_config.partial_rollout_tokens): each engine's
part of the batch goes through rollout/partial.PartialRollout, one chunk after another, driven
by a thread of the driver, so that a weight sync waits for the current chunk only.

`pause()` stops the chunk on the engines after their current decode step (each chunk's calls
carry a stop id; the engines answer the tokens so far) and holds the next one: the weights can
then change (RolloutGroup.in_flight no longer counts the handle); `resume()` continues every
unfinished sample from its prefix on the engines' new weights. Each chunk reads the group's
`policy_version` when it is submitted, so every token knows the version that sampled it
(`token_policy_version`); the batch's `policy_version` stays the version it was submitted on,
the one the staleness bound counts. Prompts with images continue with their images
(rollout/partial.py); MoE routes are not joined per chunk, so a generate asking for routes is
refused.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

from mindrl.data.batch import Batch, right_pad
from mindrl.rollout.engine_group import RolloutHandle
from mindrl.rollout.episode import Episode
from mindrl.rollout.merge import rollout_prompts, with_rollout
from mindrl.rollout.partial import PartialRollout


class ChunkedHandle(RolloutHandle):
    """A RolloutHandle whose generate runs `chunk` new tokens per sample at a time; with an
    `episode` (rollout/episode.py) each sample runs its turns, a call per turn at most."""

    def __init__(self, group, parts: List[Batch], n: int, policy_version: int, submitted: float,
                 chunk: int, seed: Optional[int], sampling_overrides: Dict,
                 episode: Optional[Episode] = None):
        super().__init__(group, parts, {}, n, policy_version, submitted)
        overrides = dict(sampling_overrides)
        if overrides.get("with_routes"):
            raise NotImplementedError("partial rollouts (rl_config.partial_rollout_tokens) "
                                      "generate without MoE routes")
        sampling = group.config.sampling_config
        max_tokens = overrides.pop("max_tokens", sampling.max_tokens)
        min_tokens = overrides.pop("min_tokens", sampling.min_tokens)
        self.overrides, self.rollouts, self.seeds, first = overrides, {}, {}, 0
        self.episode = episode
        for index, part in enumerate(parts):
            prompts, images = rollout_prompts(part)
            if prompts:
                self.rollouts[index] = PartialRollout(prompts, n, max_tokens, chunk, min_tokens,
                                                      images, episode, first * n)
                self.seeds[index] = None if seed is None else seed + first * n
            first += len(prompts)
        self._cv = threading.Condition()
        self._hold = False        # a sync asked: no new chunk until resume()
        self._running = False     # a chunk is on the engines
        self._stop_id = group.next_stop_id()    # the chunk's, for pause() to stop it
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None     # started by _watch

    # ---------------------------------------------------------------- the driver's thread

    def _watch(self) -> None:
        """Send the first chunk now, on the weights it was submitted on, and drive the rest."""
        self._running = True
        self._thread = threading.Thread(target=self._run, args=(self._send(),), daemon=True,
                                        name="partial-rollout")
        self._thread.start()

    def _run(self, first: List[Dict]) -> None:
        version, rounds = self.policy_version, first
        try:
            while True:
                try:
                    self._collect(rounds, version)
                finally:
                    with self._cv:
                        self._running = False
                        self._cv.notify_all()
                if all(r.done for r in self.rollouts.values()):
                    break
                with self._cv:
                    self._cv.wait_for(lambda: not self._hold)
                    self._running, version = True, self.group.policy_version
                    self._stop_id = self.group.next_stop_id()
                rounds = self._send()
        except BaseException as exc:    # raised again by wait() and pause()
            self._error = exc
        finally:
            self.finished = time.perf_counter()
            with self._cv:
                self._running = False
                self._cv.notify_all()

    def _send(self) -> List[Dict]:
        """The next chunk's calls on every engine at once; by round, the r-th call of each
        engine: {ref: (engine index, call)}."""
        rounds: List[Dict] = []
        for index, rollout in self.rollouts.items():
            if rollout.done:
                continue
            for r, call in enumerate(rollout.next_calls(self.seeds[index])):
                ref = self.group.engines[index].generate.remote(
                    call.prompts, call.n, **call.engine_kwargs(), stop_id=self._stop_id,
                    weights_version=self.group.policy_version, **self.overrides)
                if r == len(rounds):
                    rounds.append({})
                rounds[r][ref] = (index, call)
        return rounds

    def _collect(self, rounds: List[Dict], version: int) -> None:
        """Record a chunk's answers as sampled on weights `version`."""
        for calls in rounds:
            outputs = self.group._wait({ref: i for ref, (i, _) in calls.items()}, "generate",
                                       self.group.phase_timeout_s)
            for index, call in calls.values():
                self.rollouts[index].record(call, outputs[index], version)
        for index in {i for calls in rounds for i, _ in calls.values()}:
            self.rollouts[index].end_chunk()

    # ---------------------------------------------------------------- the caller's side

    def pause(self) -> None:
        """Stop the chunk on the engines after their current step and hold the next: returns
        once no request of this handle is on the engines."""
        with self._cv:
            self._hold = True
            if self._running:
                self.group.stop_generating([self._stop_id])
            self._cv.wait_for(lambda: not self._running)
        self._raise()

    def resume(self) -> None:
        """Continue the unfinished samples (on whatever weights the engines hold now)."""
        with self._cv:
            self._hold = False
            self._cv.notify_all()

    def busy(self) -> bool:
        """Requests may be on the engines: neither paused between chunks nor finished."""
        with self._cv:
            return self._thread.is_alive() and (self._running or not self._hold)

    def done(self) -> bool:
        return self._batch is not None or not self._thread.is_alive()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def wait(self) -> Batch:
        """As RolloutHandle.wait, plus `token_policy_version`; a paused handle is resumed."""
        if self._batch is None:
            self.resume()
            self._thread.join()
            self._raise()
            answered = []
            for index in sorted(self.rollouts):
                versions, _ = right_pad(self.rollouts[index].versions(), 0)
                answered.append(with_rollout(self.parts[index], self.rollouts[index].output(),
                                             self.n).add(token_policy_version=versions))
            batch = self._merged(answered)
            fields = getattr(self.episode, "batch_fields", None)
            self._batch = batch if fields is None else batch.add(**fields(len(batch)))
        return self._batch

    result = wait


def submit_in_chunks(group, batch: Batch, chunk: int, episode: Optional[Episode] = None,
                     **sampling_overrides) -> ChunkedHandle:
    """RolloutGroup.submit (the same split by prompt group and seeds per prompt), generated
    `chunk` new tokens per sample at a time, each sample an `episode` (default: one turn);
    returns at once."""
    seed = sampling_overrides.pop("seed", group.config.sampling_config.seed)
    handle = ChunkedHandle(group, batch.split_groups(len(group.engines)),
                           batch.samples_per_group(), group.policy_version, time.perf_counter(),
                           chunk, seed, sampling_overrides, episode)
    handle._watch()
    group._pending.append(handle)        # counted by group.in_flight while it may generate
    return handle
