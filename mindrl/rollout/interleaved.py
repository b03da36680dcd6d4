"""Multi-turn episodes that interleave (issue 63 item 7): an episode waiting for its tool
does not hold back the others. Where a chunked rollout (rollout/partial_handle.py) answers
every ended turn of a chunk at once and sends the next chunk when all have answered, here each
ended turn is answered on its own (the episode's `between` for that one turn, in a thread of
the handle's), and a sample goes back to its engine as soon as its answer is in, in a call of
its own that runs beside the engine's other calls (the engines' TURNS concurrency group; the
engine steps all of them in one loop, engines/vllm_stoppable.SharedSteps). The engine keeps
decoding every episode that is not waiting.

The bookkeeping is rollout/partial.PartialRollout's (kinds, turns, versions, the token-in
token-out prefix check); a sample's k-th call seeds from seed + k * samples + i, so its draws
do not depend on which others shared its calls. `pause()` stops every call on the engines
(each has its own stop id) and holds new ones; answers that arrive meanwhile wait, and
`resume()` sends them on the engines' new weights.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Dict, List, Optional, Tuple

from mindrl.errors import PhaseTimeout
from mindrl.rollout.engine_group import TURNS
from mindrl.rollout.partial import Chunk
from mindrl.rollout.partial_handle import ChunkedHandle

ANSWER_THREADS = 64      # turns answered at once by one handle (each waits on its tools)
GATHER_S = 0.005         # how long a finished answer waits for others to go in its call


class InterleavedHandle(ChunkedHandle):
    """A ChunkedHandle whose samples continue one by one as their turns are answered."""

    def _watch(self) -> None:
        self._running = True
        self._calls: Dict[object, Tuple[int, Chunk, int, int, float]] = {}   # ref -> call
        self._stops: List[int] = []      # the stop ids of the calls on the engines
        first = self._send_first()
        self._thread = threading.Thread(target=self._drive, args=(first,), daemon=True,
                                        name="interleaved-rollout")
        self._thread.start()

    # ---------------------------------------------------------------- the driver's thread

    def _send_first(self) -> List[object]:
        refs = []
        for index, rollout in self.rollouts.items():
            for call in rollout.next_calls(self.seeds[index]):
                refs.append(self._send(index, call))
        return refs

    def _send(self, index: int, call: Chunk):
        """One call on engine `index`, beside its others, on the group's current weights."""
        stop_id = self.group.next_stop_id()
        version = self.group.policy_version
        ref = self.group.engines[index].generate.options(concurrency_group=TURNS).remote(
            call.prompts, call.n, **call.engine_kwargs(), stop_id=stop_id,
            weights_version=version, beside_others=True, **self.overrides)
        self._calls[ref] = (index, call, version, stop_id, time.perf_counter())
        self._stops.append(stop_id)
        return ref

    def _drive(self, first) -> None:
        waiting: Dict[cf.Future, Tuple[int, List[Tuple[int, int]]]] = {}   # answer -> turn
        ready: Dict[int, List[int]] = {}          # engine -> samples to send
        pool = cf.ThreadPoolExecutor(ANSWER_THREADS, thread_name_prefix="episode-turn")
        try:
            while not all(r.done for r in self.rollouts.values()):
                self._send_ready(ready)
                futures = {ref.future(): ref for ref in self._calls}
                if not futures and not waiting and any(ready.values()):
                    with self._cv:           # paused with samples to send: until resume()
                        self._cv.wait_for(lambda: not self._hold)
                    continue
                if not futures and not waiting:
                    raise RuntimeError("interleaved rollout: samples left with nothing on "
                                       "the engines and no turn being answered")
                finished, _ = cf.wait([*futures, *waiting], timeout=self._poll_s(),
                                      return_when=cf.FIRST_COMPLETED)
                if waiting:      # answers that come at once go back in one call
                    more, _ = cf.wait(waiting, timeout=GATHER_S,
                                      return_when=cf.ALL_COMPLETED)
                    finished = set(finished) | set(more)
                self._check_deadline()
                for future in finished:
                    if future in waiting:
                        index, ended = waiting.pop(future)
                        rollout = self.rollouts[index]
                        rollout.answer(ended, future.result())
                        ready.setdefault(index, []).extend(
                            i for i, _ in ended if rollout.samples[i].finish_reason is None)
                    else:
                        self._recorded(futures[future], ready, waiting, pool)
        except BaseException as exc:      # raised again by wait() and pause()
            self._error = exc
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.finished = time.perf_counter()
            with self._cv:
                self._running = False
                self._cv.notify_all()

    def _recorded(self, ref, ready, waiting, pool) -> None:
        """A call answered: record it; its ended turns go to be answered one by one, the
        samples it cut (a chunk's budget, a stop) are ready to go on."""
        index, call, version, stop_id, _ = self._calls[ref]
        output = self.group._wait({ref: index}, "generate", self.group.phase_timeout_s)[index]
        with self._cv:
            del self._calls[ref]
            self._stops.remove(stop_id)
        rollout = self.rollouts[index]
        commits = getattr(output, "token_commits", None)     # an in-flight sync's
        rollout.record(call, output, version, None if commits is None else
                       [[self.group.commit_versions[c] for c in row] for row in commits])
        ended = rollout.take_ended()
        for one in ended:
            [view] = rollout.turn_ends([one])
            waiting[pool.submit(self.episode.between, [view])] = (index, [one])
        waits = {i for i, _ in ended}
        ready.setdefault(index, []).extend(
            i for i in call.samples if rollout.samples[i].finish_reason is None
            and i not in waits)
        with self._cv:
            self._running = bool(self._calls)
            self._cv.notify_all()

    def _send_ready(self, ready: Dict[int, List[int]]) -> None:
        """Send each engine's ready samples in one call, unless a sync holds new calls."""
        with self._cv:
            if self._hold:
                return
            for index, samples in ready.items():
                if samples:
                    self._send(index, self.rollouts[index].calls_for(samples,
                                                                     self.seeds[index]))
            ready.clear()
            self._running = bool(self._calls)

    def _poll_s(self) -> float:
        """How long to wait for an answer before looking at the hold and the deadline again."""
        return 0.05 if self._hold else 1.0

    def _check_deadline(self) -> None:
        limit = self.group.phase_timeout_s
        if not limit:
            return
        now = time.perf_counter()
        for index, _, _, _, sent in self._calls.values():
            if now - sent > limit:
                name = self.group._name(index)
                raise PhaseTimeout(f"{name} did not answer a generate within {limit:.0f} s",
                                   "generate", [name], limit)

    # ---------------------------------------------------------------- the caller's side

    def pause(self) -> None:
        """Stop every call on the engines after their current step and hold new ones:
        returns once no request of this handle is on the engines."""
        with self._cv:
            self._hold = True
            if self._calls:
                self.group.stop_generating(list(self._stops))
            self._cv.wait_for(lambda: not self._calls or not self._thread.is_alive())
            self._running = False
        self._raise()


def submit_interleaved(group, batch, chunk: int, episode, **sampling_overrides
                       ) -> InterleavedHandle:
    """rollout/partial_handle.submit_in_chunks, each sample continuing as soon as its turn is
    answered (`episode` multi-turn)."""
    seed = sampling_overrides.pop("seed", group.config.sampling_config.seed)
    handle = InterleavedHandle(group, batch.split_groups(len(group.engines)),
                               batch.samples_per_group(), group.policy_version,
                               time.perf_counter(), chunk, seed, sampling_overrides, episode)
    handle._watch()
    group._pending.append(handle)
    return handle
