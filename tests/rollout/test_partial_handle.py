"""A partial rollout's handle (rollout/partial_handle.py) over engines that answer by hand: a
pause stops the chunk on the engines (they answer the tokens so far) and holds the next, so a
weight sync can run; the batch then continues on the new version, each token keeping the
version that sampled it."""

import itertools
import threading
import time
from types import SimpleNamespace

import pytest

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.data.batch import Batch
from mindrl.rollout.engine_group import RolloutGroup
from mindrl.rollout.partial import crossed_update_frac
from mindrl.rollout.partial_handle import ChunkedHandle, submit_in_chunks
from support.counting_engine import EOS, count_up


class _Ref:
    """What a Ray remote call returns: a hashable reference to the answer, made when the
    group's gate opens (a stop asked before then cuts it)."""

    def __init__(self, answer):
        self.answer = answer


class _Engine:
    """A Ray engine actor answering with support/counting_engine.count_up; a generate whose
    stop id the group stopped answers one token per sample, finish reason None (what
    VLLMEngine answers when a sync stops it after a step)."""

    def __init__(self, group):
        self.generate = SimpleNamespace(remote=self._remote)
        self.group = group

    def _remote(self, prompts, n, max_tokens, min_tokens, seed=None, stop_id=None,
                weights_version=None):
        self.group.calls.append((len(prompts), n, max_tokens, seed))
        self.group.versions.append(weights_version)

        def answer():
            if stop_id not in self.group.stopped:
                return count_up(prompts, n, max_tokens, min_tokens)
            out = count_up(prompts, n, 1)
            out.finish_reasons = [None if r == "length" else r for r in out.finish_reasons]
            return out

        return _Ref(answer)


class _Group:
    """Engines that answer when `gate` is open; `policy_version` and the stop ids as
    RolloutGroup's."""

    phase_timeout_s = None
    in_flight = RolloutGroup.in_flight

    def __init__(self, engines: int):
        self.calls, self.stopped, self._ids = [], set(), itertools.count(1)
        self.versions = []          # the weights version each generate call carried
        self.engines = [_Engine(self) for _ in range(engines)]
        self.config = GenerateConfig(sampling_config=SamplingConfig(max_tokens=20, seed=0))
        self.policy_version, self.gate, self._pending = 0, threading.Event(), []

    def next_stop_id(self):
        return next(self._ids)

    def stop_generating(self, stop_ids):
        self.stopped.update(stop_ids)

    def _wait(self, refs, what, timeout_s=None):
        assert self.gate.wait(10), "the test never opened the gate"
        return {index: ref.answer() for ref, index in refs.items()}


def _submit(group, prompts, n, chunk=3, seed=100):
    return submit_in_chunks(group, Batch.from_prompts(prompts, n, pad_id=0), chunk, seed=seed)


def test_a_sync_stops_the_chunk_and_continues_the_batch_on_the_new_version():
    """The pause stops chunk 1 on the engines (1 token each instead of 3), the sync runs, and
    every sample continues from its prefix on version 1 in chunks of 3."""
    group = _Group(engines=2)
    handle = _submit(group, [[7], [1]], n=2)
    pausing = threading.Thread(target=handle.pause)
    pausing.start()
    time.sleep(0.2)
    assert pausing.is_alive() and group.in_flight == 1     # chunk 1 is on the engines
    assert group.stopped == {handle._stop_id}              # the pause stopped it
    group.gate.set()
    pausing.join(5)
    assert not pausing.is_alive() and group.in_flight == 0 and not handle.done()
    assert len(group.calls) == 2                            # chunk 1 only, on each engine
    group.policy_version = 1                                # the sync
    batch = handle.wait()
    assert batch["response_ids"].tolist() == [[8, 9, EOS, 0, 0, 0, 0, 0, 0]] * 2 + [
        [2, 3, 4, 5, 6, 7, 8, 9, EOS]] * 2
    assert batch["token_policy_version"].tolist() == [[0, 1, 1] + [0] * 6] * 2 + [
        [0, 1, 1, 1, 1, 1, 1, 1, 1]] * 2
    assert batch["policy_version"].tolist() == [0, 0, 0, 0]   # the start version
    assert batch["rollout_log_probs"][2].tolist() == [-0.25] * 9
    assert batch["finish_reason"] == ["stop"] * 4
    assert crossed_update_frac(batch["token_policy_version"], batch["response_mask"]) == 1.0
    # engine 1 (prompt [1], group 1, seed 100 + 1*2): chunk 1 with n=2, then one request
    # per sample, 3 tokens a chunk: 2 + 3 + 3 + 2 tokens
    assert group.calls[1] == (1, 2, 3, 102)
    assert sorted(group.calls[2:]) == [(2, 1, [3, 3], 102), (2, 1, [3, 3], 104),
                                       (2, 1, [3, 3], 106), (2, 1, [3, 3], 108)]
    assert group.in_flight == 0 and handle.done()
    assert group.stopped == {handle._stop_id - 3}           # later chunks ran to their end
    # each call names the weights it means (an engine with shared weights resets on a change)
    assert group.versions[:2] == [0, 0] and set(group.versions[2:]) == {1}


def test_an_engine_failure_reaches_the_caller():
    group = _Group(engines=1)
    group.gate.set()

    def broken(*args, **kwargs):
        raise RuntimeError("rollout engine 0 failed in generate")

    group._wait = broken
    handle = _submit(group, [[1]], n=1)
    with pytest.raises(RuntimeError, match="engine 0 failed"):
        handle.wait()


def test_a_generate_asking_for_routes_is_refused():
    group = _Group(engines=1)
    batch = Batch.from_prompts([[1]], 1, pad_id=0)
    with pytest.raises(NotImplementedError, match="partial_rollout_tokens"):
        ChunkedHandle(group, [batch], 1, 0, 0.0, 3, None, {"with_routes": True})
