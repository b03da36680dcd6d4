"""The episode seam (rollout/episode.py) through the rollout's bookkeeping (rollout/partial.py):
a scripted episode of several turns against an engine that counts up (support/counting_engine:
from the prefix's last id to 9, then EOS), so every id is known by hand. What is checked: the
sampled ids carry forward as they are, the inserted ids follow as given (kind, turn, log-prob
0, the calling turn's version), each later call runs exactly the previous prompt + output +
inserted ids, the budget counts both kinds, and the merged Batch trains exactly the sampled
tokens."""

import pytest
import torch

from mindrl.data.batch import Batch
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.episode import INSERTED, SAMPLED, SingleTurn, trained_ids
from mindrl.rollout.merge import with_rollout
from mindrl.rollout.partial import PartialRollout, generate_in_chunks
from support.counting_engine import EOS, count_up


class Scripted:
    """Inserts `answers[turn]` after each turn the engine ended on its own; done after them."""

    multi_turn = True

    def __init__(self, *answers):
        self.answers, self.seen = answers, []

    def between(self, turns):
        out = []
        for t in turns:
            self.seen.append((list(t.prompt), list(t.response), list(t.kinds), t.turn))
            out.append(list(self.answers[t.turn]) if t.turn < len(self.answers) else None)
        return out


def _run(episode, max_tokens=40, prompts=([1],), n=1, chunk=None, versions=None):
    calls = []

    def generate(prompts, n, max_tokens, min_tokens, seed=None):
        calls.append([list(p) for p in prompts])
        return count_up(prompts, n, max_tokens, min_tokens)

    version = (lambda: 0) if versions is None else (lambda: next(versions))
    out, per_token = generate_in_chunks(generate, [list(p) for p in prompts], n, max_tokens,
                                        chunk or max_tokens, version=version, episode=episode)
    return out, per_token, calls


def test_two_turns_with_an_inserted_answer_between():
    episode = Scripted([4, 5])
    out, per_token, calls = _run(episode, versions=iter([3, 4]))
    turn0, turn1 = [2, 3, 4, 5, 6, 7, 8, 9, EOS], [6, 7, 8, 9, EOS]
    assert out.response_token_ids == [turn0 + [4, 5] + turn1]
    assert out.sampled == [[SAMPLED] * 9 + [INSERTED] * 2 + [SAMPLED] * 5]
    assert out.turns == [[0] * 11 + [1] * 5]
    assert out.log_probs == [[-0.25] * 9 + [0.0, 0.0] + [-0.25] * 5]
    # the inserted ids carry the version of the turn that called; the next turn its own
    assert per_token == [[3] * 11 + [4] * 5]
    assert out.finish_reasons == ["stop"]
    # token in, token out: the second call ran prompt + the first output + the inserted ids
    assert calls == [[[1]], [[1] + turn0 + [4, 5]]]
    # the episode saw the sample after each turn, and was asked again after the last
    assert [(s[1], s[3]) for s in episode.seen] == [(turn0, 0), (turn0 + [4, 5] + turn1, 1)]


def test_the_budget_counts_both_kinds_and_an_answer_past_it_ends_the_episode_length():
    out, _, calls = _run(Scripted([3, 4, 5, 6]), max_tokens=11)
    # 9 sampled + 2 of the 4 inserted ids fill the 11: no further call
    assert out.response_token_ids == [[2, 3, 4, 5, 6, 7, 8, 9, EOS, 3, 4]]
    assert out.sampled == [[SAMPLED] * 9 + [INSERTED] * 2]
    assert out.finish_reasons == ["length"] and len(calls) == 1
    # a later turn gets what remains of the budget
    out, _, calls = _run(Scripted([8]), max_tokens=12)
    assert out.response_token_ids == [[2, 3, 4, 5, 6, 7, 8, 9, EOS, 8, 9, EOS]]
    assert out.finish_reasons == ["stop"]


def test_a_chunk_cut_is_a_turn_boundary_the_episode_is_not_asked_about():
    episode = Scripted([4, 5])
    out, per_token, calls = _run(episode, chunk=3, versions=iter(range(10)))
    assert out.response_token_ids == [[2, 3, 4, 5, 6, 7, 8, 9, EOS, 4, 5, 6, 7, 8, 9, EOS]]
    assert out.turns == [[0] * 11 + [1] * 5]
    assert [s[3] for s in episode.seen] == [0, 1]          # after each turn's EOS only
    # chunks of 3: [2 3 4] v0, [5 6 7] v1, [8 9 EOS] v2 then the insertion at v2,
    # [6 7 8] v3, [9 EOS] v4
    assert per_token == [[0] * 3 + [1] * 3 + [2] * 5 + [3] * 3 + [4] * 2]
    assert len(calls) == 5


def test_an_engine_that_ran_other_ids_than_the_prefix_is_refused():
    """What a re-tokenised history does (a dropped id at the boundary): refused by name."""
    def drifting(prompts, n, max_tokens, min_tokens, seed=None):
        out = count_up(prompts, n, max_tokens, min_tokens)
        out.prompt_token_ids = [p[:-1] if len(p) > 1 else p for p in out.prompt_token_ids]
        return out

    with pytest.raises(ValueError, match="sample 0: the engine ran 11 prompt ids, not the 12"):
        generate_in_chunks(drifting, [[1]], 1, 40, 40, episode=Scripted([4, 5]))


def test_a_single_turn_is_today_s_rollout():
    single, _, _ = _run(SingleTurn(), prompts=([1], [6]), n=2)
    plain = count_up([[1], [6]], 2, 40)
    assert single.response_token_ids == plain.response_token_ids
    assert single.log_probs == plain.log_probs
    assert single.sampled == [[SAMPLED] * len(r) for r in plain.response_token_ids]
    assert single.turns == [[0] * len(r) for r in plain.response_token_ids]


def test_the_merged_batch_trains_exactly_the_sampled_tokens_and_verifiers_read_all():
    r = PartialRollout([[1], [6]], n=2, max_tokens=40, chunk=40, episode=Scripted([4, 5]))
    while not r.done:
        for call in r.next_calls():
            r.record(call, count_up(call.prompts, call.n, call.overrides["max_tokens"]), 0)
        r.end_chunk()
    out = r.output()
    batch = with_rollout(Batch.from_prompts([[1], [6]], 2, pad_id=0), out, 2)
    ids, trained = batch["response_ids"], batch["loss_mask"]
    for row, (response, kinds) in enumerate(zip(out.response_token_ids, out.sampled)):
        assert ids[row][trained[row].bool()].tolist() == trained_ids(response, kinds)
        assert batch.response_lists()[row] == response           # inserted ids included
    assert torch.equal(batch["loss_mask"] <= batch["response_mask"],
                       torch.ones_like(trained, dtype=torch.bool))
    assert batch["token_turn"][0].tolist() == out.turns[0]
    assert (batch["rollout_log_probs"][(batch["response_mask"] - trained).bool()] == 0).all()


def test_a_single_turn_rollout_writes_loss_mask_equal_to_response_mask():
    out = RolloutOutput([[1]], [[3, 4, EOS]], [[-1.0] * 3], ["stop"])
    tensors = out.response_tensors(pad_id=0, length=5)
    assert torch.equal(tensors["loss_mask"], tensors["response_mask"])
    assert tensors["token_turn"].tolist() == [[0] * 5]


def test_the_episode_is_asked_once_per_chunk_for_every_turn_that_ended():
    class Counting(Scripted):
        calls = 0

        def between(self, turns):
            Counting.calls += 1
            assert len(turns) == 4 and all(t.last_turn()[-1] == EOS for t in turns)
            return super().between(turns)

    out, _, calls = _run(Counting([4, 5]), prompts=([1], [3]), n=2)
    assert Counting.calls == 2 and len(calls) == 2      # two turns, two engine calls
    assert all(max(t) == 1 for t in out.turns)
