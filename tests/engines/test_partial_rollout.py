"""Continuation from the prefix is exact: one in-process vLLM generating greedily in chunks of
2 tokens (rollout/partial.generate_in_chunks), weights unchanged, gives the whole
generation's tokens and sampled log-probs; so does a chunk that a sync stopped mid-way
(engines/vllm_stoppable.py), and a stoppable generate that nothing stops is a plain one."""

import pytest
from support.char_engine import start_char_engine

from mindrl.rollout.partial import PartialRollout, generate_in_chunks

pytestmark = pytest.mark.slow

MAX_TOKENS = 9


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine, _, prompts = start_char_engine(tmp_path_factory.mktemp("model"), MAX_TOKENS, 0.0)
    yield engine, prompts
    engine.close()


def _same_rollout(got, want):
    assert got.response_token_ids == want.response_token_ids
    assert got.finish_reasons == want.finish_reasons
    assert got.prompt_token_ids == want.prompt_token_ids
    assert got.prompt_index == want.prompt_index
    for ours, theirs in zip(got.log_probs, want.log_probs):
        assert len(ours) == len(theirs)
        assert max((abs(a - b) for a, b in zip(ours, theirs)), default=0.0) < 1e-5


def test_chunks_of_2_tokens_give_the_whole_generation_exactly(engine):
    engine, prompts = engine
    whole = engine.generate(prompts, n=1)      # greedy: vLLM allows n=1 only
    chunked, versions = generate_in_chunks(engine.generate, prompts, n=1,
                                           max_tokens=MAX_TOKENS, chunk=2, seed=0)
    assert max(map(len, whole.response_token_ids)) > 4      # 3+ chunks for some
    # A continued sample also stops at EOS: the 9-token budget is the whole one.
    _same_rollout(chunked, whole)
    assert versions == [[0] * len(ids) for ids in whole.response_token_ids]


def test_a_stoppable_generate_nothing_stops_is_the_plain_one(engine):
    """Sampled (n=3, seeded): the streamed tokens, log-probs and finish reasons are exactly
    LLM.generate's."""
    engine, prompts = engine
    kwargs = dict(n=3, temperature=1.0, seed=7, max_tokens=12)
    plain = engine.generate(prompts, **kwargs)
    streamed = engine.generate(prompts, stop_id=1, **kwargs)
    assert streamed.response_token_ids == plain.response_token_ids
    assert streamed.log_probs == plain.log_probs
    assert streamed.finish_reasons == plain.finish_reasons
    assert streamed.prompt_token_ids == plain.prompt_token_ids


def test_a_generate_stopped_after_its_first_step_continues_to_the_whole_generation(engine):
    """A stop asked before the generate starts ends it after one engine step: one token a
    sample, no finish reason; the partial rollout then continues every sample from its prefix
    and ends with the whole greedy generation's tokens and log-probs."""
    engine, prompts = engine
    whole = engine.generate(prompts, n=1)
    engine.stop_generating([5])
    rollout = PartialRollout(prompts, 1, MAX_TOKENS, MAX_TOKENS)
    (first,) = rollout.next_calls()
    cut = engine.generate(first.prompts, first.n, **first.engine_kwargs(), stop_id=5)
    assert [len(ids) for ids in cut.response_token_ids] == [1, 1, 1]
    assert cut.finish_reasons == [None, None, None]
    assert not engine.llm.llm_engine.has_unfinished_requests()     # the rest was aborted
    rollout.record(first, cut, 0)
    rollout.end_chunk()
    assert rollout.pending() == [0, 1, 2]
    while not rollout.done:
        for call in rollout.next_calls():
            rollout.record(call, engine.generate(call.prompts, call.n, **call.engine_kwargs(),
                                                 stop_id=6), 1)
        rollout.end_chunk()
    _same_rollout(rollout.output(), whole)
    assert rollout.versions() == [[0] + [1] * (len(ids) - 1) for ids in whole.response_token_ids]


class _Answer:
    """An episode that answers every turn the engine ended itself with the same ids (what a
    tool's reply in a template's layout would be), for two turns."""

    multi_turn = True

    def __init__(self, ids):
        self.ids, self.turns = ids, []

    def between(self, turns):
        self.turns += [t.turn for t in turns]
        return [list(self.ids) if t.turn < 2 else None for t in turns]


def test_an_episode_s_turns_continue_on_vllm_from_exactly_their_prefix(engine):
    """Sampled (n=4, seeded): every sample that stopped on its own gets the answer inserted and
    goes on; vLLM must have run each later call on prompt + output + answer (PartialRollout
    compares the prompt ids vLLM reports), the answer's tokens are inserted, in the calling
    turn, with log-prob 0, and the whole episode stays within its 40 tokens."""
    engine, prompts = engine
    answer = prompts[2][:3]                                   # three ids of "hello"
    episode = _Answer(answer)
    out, _ = generate_in_chunks(engine.generate, prompts, n=4, max_tokens=40, chunk=40,
                                seed=3, episode=episode, temperature=1.0)
    multi = [i for i, turns in enumerate(out.turns) if max(turns, default=0) > 0]
    assert multi, out.finish_reasons                         # seed 3 stops several samples
    for i in multi:
        ids, kinds, turns = out.response_token_ids[i], out.sampled[i], out.turns[i]
        first = turns.index(1)
        assert ids[first - 3:first] == answer and kinds[first - 3:first] == [0, 0, 0]
        assert turns[first - 3:first] == [0, 0, 0]            # the answer is the caller's
        assert out.log_probs[i][first - 3:first] == [0.0, 0.0, 0.0]
        assert kinds[first] == 1 and len(ids) <= 40
    assert 0 in episode.turns and all(t in (0, 1, 2) for t in episode.turns)
