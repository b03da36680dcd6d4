"""Interleaved multi-turn rollouts (rollout/interleaved.py) over engines that answer by hand
(support/counting_engine): an episode waiting for its answer does not hold back the others
(a turn barrier would deadlock the first test), each sample's calls carry its own seeds, a
pause stops every call on the engines and holds the answered samples until resume, and the
rollout's bookkeeping is the chunked one's (same tokens, kinds and turns)."""

import concurrent.futures as cf
import itertools
import threading
from types import SimpleNamespace

import pytest

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.data.batch import Batch
from mindrl.rollout.engine_group import TURNS, RolloutGroup
from mindrl.rollout.episode import INSERTED, SAMPLED
from mindrl.rollout.interleaved import submit_interleaved
from mindrl.rollout.partial_handle import submit_in_chunks
from support.counting_engine import EOS, count_up
from support.future_ref import FutureRef


class _Engine:
    """A Ray engine actor: each generate answers in a thread of its own (calls run beside
    each other, as in the engines' TURNS group); a stopped one answers one token per sample,
    finish reason None."""

    def __init__(self, group):
        self.group = group
        self.generate = SimpleNamespace(remote=self._remote, options=self._options)

    def _options(self, concurrency_group=None):
        self.group.groups.append(concurrency_group)
        return SimpleNamespace(remote=self._remote)

    def _remote(self, prompts, n, max_tokens, min_tokens, seed=None, stop_id=None,
                weights_version=None, beside_others=False):
        self.group.calls.append(dict(prompts=[list(p) for p in prompts], n=n, seed=seed,
                                     version=weights_version, beside=beside_others))

        def answer():
            self.group.gate.wait(10)
            if stop_id in self.group.stopped:
                out = count_up(prompts, n, 1)
                out.finish_reasons = [None if r == "length" else r for r in out.finish_reasons]
                return out
            return count_up(prompts, n, max_tokens, min_tokens)

        return FutureRef(self.group.threads.submit(answer))


class _Group:
    phase_timeout_s = None
    in_flight = RolloutGroup.in_flight

    def __init__(self, engines=1):
        self.calls, self.groups, self.stopped, self._ids = [], [], set(), itertools.count(1)
        self.threads = cf.ThreadPoolExecutor(16)
        self.engines = [_Engine(self) for _ in range(engines)]
        self.config = GenerateConfig(sampling_config=SamplingConfig(max_tokens=40, seed=0))
        self.policy_version, self.gate, self._pending = 0, threading.Event(), []
        self.gate.set()

    def next_stop_id(self):
        return next(self._ids)

    def stop_generating(self, stop_ids):
        self.stopped.update(stop_ids)

    def _name(self, index):
        return f"engine {index}"

    def _wait(self, refs, what, timeout_s=None):
        return {index: ref.future().result(10) for ref, index in refs.items()}


class _Answers:
    """Answers [4, 5] after each sample's first turn, then ends it; sample 0's answer waits
    until every other sample has finished its second turn (asked of the episode as a turn)."""

    multi_turn = True

    def __init__(self, samples, hold_first=True):
        self.others_done = threading.Event()
        self.samples, self.hold_first = samples, hold_first
        self.second_turns, self.lock = set(), threading.Lock()

    def between(self, turns):
        out = []
        for t in turns:
            if t.turn == 0:
                if t.sample == 0 and self.hold_first:
                    assert self.others_done.wait(10), "sample 0's wait held the others back"
                out.append([4, 5])
            else:
                with self.lock:
                    self.second_turns.add(t.sample)
                    if self.second_turns >= set(range(1, self.samples)):
                        self.others_done.set()
                out.append(None)
        return out


def _batch(prompts, n):
    return Batch.from_prompts(prompts, n, pad_id=0)


def test_an_episode_waiting_for_its_answer_does_not_hold_back_the_others():
    group = _Group()
    episode = _Answers(samples=4)
    batch = submit_interleaved(group, _batch([[1], [3]], 2), 40, episode, seed=100).wait()
    turn0 = {1: [2, 3, 4, 5, 6, 7, 8, 9, EOS], 3: [4, 5, 6, 7, 8, 9, EOS]}
    for i, first in enumerate([1, 1, 3, 3]):
        assert batch.response_lists()[i] == turn0[first] + [4, 5] + [6, 7, 8, 9, EOS]
    assert episode.second_turns == {0, 1, 2, 3}
    # the first call is the batch's (n per prompt); every later one goes beside the others
    assert group.calls[0]["n"] == 2 and all(c["beside"] for c in group.calls)
    assert all(c["n"] == 1 for c in group.calls[1:])
    assert set(group.groups) == {TURNS}
    # sample 0 went on alone, after the others had finished
    assert group.calls[-1]["prompts"] == [[1] + turn0[1] + [4, 5]]


def test_each_sample_seeds_its_own_calls():
    """Sample i's k-th call seeds from seed + k * samples + i, whoever shares the call."""
    group = _Group()
    submit_interleaved(group, _batch([[1], [3]], 2), 40, _Answers(4, hold_first=False),
                       seed=100).wait()
    assert group.calls[0]["seed"] == 100
    seeds = sorted(s for c in group.calls[1:] for s in c["seed"])
    assert seeds == [100 + 1 * 4 + i for i in range(4)]


def test_the_same_tokens_kinds_and_turns_as_the_chunked_rollout():
    chunked = submit_in_chunks(_Group(), _batch([[1], [3], [5]], 2), 40,
                               episode=_Answers(6, hold_first=False), seed=7).wait()
    interleaved = submit_interleaved(_Group(), _batch([[1], [3], [5]], 2), 40,
                                     _Answers(6, hold_first=False), seed=7).wait()
    assert interleaved.response_lists() == chunked.response_lists()
    for field in ("response_mask", "rollout_log_probs", "token_turn", "loss_mask"):
        assert interleaved[field].tolist() == chunked[field].tolist(), field
    kinds = interleaved["loss_mask"][0].tolist()[:11]
    assert kinds == [SAMPLED] * 9 + [INSERTED] * 2


def test_a_pause_stops_the_calls_and_holds_answered_samples_until_resume():
    group = _Group()
    group.gate.clear()                  # the first call waits on the engine
    handle = submit_interleaved(group, _batch([[1]], 2), 40, _Answers(2, hold_first=False),
                                seed=0)
    paused = threading.Thread(target=handle.pause)
    paused.start()
    group.gate.set()
    paused.join(10)
    assert not paused.is_alive() and not handle.busy()
    sent = len(group.calls)
    group.policy_version = 1            # a sync ran
    assert len(group.calls) == sent     # nothing was sent while paused
    batch = handle.wait()               # resumes
    assert batch["token_policy_version"][0].tolist()[-1] == 1
    assert all(r in ("stop", "length") for r in batch["finish_reason"])


def test_an_answer_that_raises_reaches_the_caller():
    class Raises(_Answers):
        def between(self, turns):
            raise RuntimeError("the environment broke on sample 3")

    with pytest.raises(RuntimeError, match="sample 3"):
        submit_interleaved(_Group(), _batch([[1]], 2), 40, Raises(2), seed=0).wait()


def test_tokens_sampled_across_an_inflight_sync_keep_their_versions():
    """An engine taking weights in while generating answers each token's count of syncs
    (token_commits): the tokens keep the versions those counts stood for, and a turn's
    inserted ids the version of its last sampled token."""
    group = _Group()
    group.commit_versions = [0, 5]          # after its first sync the engines held version 5
    engine = group.engines[0]
    plain = engine._remote

    def with_commits(*args, **kwargs):
        ref = plain(*args, **kwargs)
        future = cf.Future()

        def tag(done):
            out = done.result()
            out.token_commits = [[0] * (len(ids) // 2) + [1] * (len(ids) - len(ids) // 2)
                                 for ids in out.response_token_ids]
            future.set_result(out)
        ref.future().add_done_callback(tag)
        return FutureRef(future)

    engine._remote = with_commits
    engine.generate = SimpleNamespace(remote=with_commits,
                                      options=lambda **_: SimpleNamespace(remote=with_commits))
    batch = submit_interleaved(group, _batch([[1]], 1), 40, _Answers(1, hold_first=False),
                               seed=0).wait()
    versions = batch["token_policy_version"][0].tolist()
    # turn 0: 9 tokens (4 on version 0, 5 on 5); the answer's 2 ids: 5; turn 1: 5 tokens (2, 3)
    assert versions[:16] == [0] * 4 + [5] * 5 + [5, 5] + [0] * 2 + [5] * 3
