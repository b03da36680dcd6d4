"""Partial rollouts' bookkeeping (rollout/partial.py) with hand-made chunk answers: which
samples continue, from which prefix, and the tokens, log-probs and versions appended."""

import pytest
import torch

from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.partial import (PartialRollout, crossed_update_frac, generate_in_chunks,
                                    whole_generation_versions)
from support.counting_engine import count_up

EOS = 2


def answer(ids, logps, reasons):
    return RolloutOutput([], ids, logps, reasons)


def test_a_sample_finishing_in_chunk_1_and_one_spanning_3_chunks_across_a_version_change():
    r = PartialRollout([[5, 6], [7]], n=1, max_tokens=7, chunk=3)
    [first] = r.next_calls()
    assert (first.samples, first.prompts, first.n) == ([0, 1], [[5, 6], [7]], 1)
    assert first.overrides == {"max_tokens": 3, "min_tokens": 0}
    # Sample 0 stops at EOS in chunk 1; sample 1 is cut at the chunk's 3 tokens.
    r.record(first, answer([[10, EOS], [20, 21, 22]], [[-.1, -.2], [-1., -2., -3.]],
                           ["stop", "length"]), version=4)
    r.end_chunk()
    assert r.pending() == [1] and not r.done
    [second] = r.next_calls()
    assert (second.samples, second.prompts, second.n) == ([1], [[7, 20, 21, 22]], 1)
    assert second.overrides == {"max_tokens": [3], "min_tokens": [0]}   # one per prompt
    r.record(second, answer([[23, 24, 25]], [[-4., -5., -6.]], ["length"]), version=5)
    r.end_chunk()
    [third] = r.next_calls()
    assert third.prompts == [[7, 20, 21, 22, 23, 24, 25]]
    assert third.overrides["max_tokens"] == [1]      # 7 - 6 remain
    r.record(third, answer([[26]], [[-7.]], ["length"]), version=5)
    r.end_chunk()
    assert r.done and r.next_calls() == []
    out = r.output()
    assert out.prompt_token_ids == [[5, 6], [7]] and out.prompt_index == [0, 1]
    assert out.response_token_ids == [[10, EOS], [20, 21, 22, 23, 24, 25, 26]]
    assert out.log_probs == [[-.1, -.2], [-1., -2., -3., -4., -5., -6., -7.]]
    assert out.finish_reasons == ["stop", "length"]
    assert r.versions() == [[4, 4], [4, 4, 4, 5, 5, 5, 5]]


def test_images_go_with_every_continuation_and_the_engine_s_prompt_ids_are_reported():
    r = PartialRollout([[5, 9], [7]], n=2, max_tokens=4, chunk=2, images=[("png",), ()])
    [first] = r.next_calls()
    assert first.images == [("png",), ()] and first.engine_kwargs()["images"] == first.images
    expanded = [[5, 9, 9, 9]] * 2 + [[7]] * 2        # the engine's ids: its pad expanded
    r.record(first, RolloutOutput(expanded, [[1, 2], [EOS], [3, 4], [5, 6]],
                                  [[-1., -1.], [-1.], [-1., -1.], [-1., -1.]],
                                  ["length", "stop", "length", "length"]), 0)
    r.end_chunk()
    [second] = r.next_calls()
    # One pad per image plus the tokens so far, each with its own prompt's images.
    assert second.samples == [0, 2, 3]
    assert second.prompts == [[5, 9, 1, 2], [7, 3, 4], [7, 5, 6]]
    assert second.images == [("png",), (), ()]
    r.record(second, RolloutOutput([[0]] * 3, [[EOS]] * 3, [[-1.]] * 3, ["stop"] * 3), 1)
    r.end_chunk()
    assert r.output().prompt_token_ids == expanded
    assert "images" not in PartialRollout([[1]], 1, 2, 1).next_calls()[0].engine_kwargs()


def test_a_finished_sample_is_never_continued():
    r = PartialRollout([[1]], n=2, max_tokens=8, chunk=2)
    [first] = r.next_calls()
    assert first.samples == [0, 1] and first.n == 2 and first.prompts == [[1]]
    r.record(first, answer([[EOS], [3, 4]], [[-1.], [-1., -1.]], ["stop", "length"]), 0)
    r.end_chunk()
    [call] = r.next_calls()
    assert call.samples == [1]
    with pytest.raises(ValueError, match="never continued"):
        r.record(type(call)([0], [[1, EOS]], 1, call.overrides),
                 answer([[5]], [[-1.]], ["stop"]), 1)
    with pytest.raises(ValueError, match="have not finished"):
        r.output()


def test_a_chunk_the_engine_cut_short_ends_the_sample_and_min_tokens_count_over_chunks():
    r = PartialRollout([[1]], n=1, max_tokens=10, chunk=4, min_tokens=6)
    [first] = r.next_calls()
    assert first.overrides == {"max_tokens": 4, "min_tokens": 4}
    r.record(first, answer([[3, 4, 5, 6]], [[-1.] * 4], ["length"]), 0)
    r.end_chunk()
    [second] = r.next_calls()
    assert second.overrides == {"max_tokens": [4], "min_tokens": [2]}
    # "length" with fewer tokens than asked: the context is full, not the chunk.
    r.record(second, answer([[7]], [[-1.]], ["length"]), 0)
    r.end_chunk()
    assert r.done and r.output().response_token_ids == [[3, 4, 5, 6, 7]]
    with pytest.raises(ValueError, match="chunk must be an integer > 0"):
        PartialRollout([[1]], 1, 4, 0)


def test_generate_in_chunks_drives_an_engine_and_reads_the_version_per_chunk():
    """An engine that counts up from the prefix's last id, EOS after 9 (counting_engine)."""
    calls = []

    def generate(prompts, n, max_tokens, min_tokens, seed=None):
        calls.append((len(prompts), n, max_tokens, seed))
        return count_up(prompts, n, max_tokens, min_tokens)

    versions = iter([0, 1, 1, 2])
    synced = []
    out, per_token = generate_in_chunks(generate, [[7], [1]], n=2, max_tokens=20, chunk=3,
                                        version=lambda: next(versions), seed=100,
                                        between=synced.append)
    assert out.response_token_ids[:2] == [[8, 9, EOS]] * 2
    assert out.response_token_ids[2:] == [[2, 3, 4, 5, 6, 7, 8, 9, EOS]] * 2
    assert per_token[0] == [0, 0, 0] and per_token[2] == [0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert synced == [1, 2]
    # Chunk 0: 2 prompts x n=2 from seed 100; chunk c: one request per sample from 100 + c*4.
    assert calls == [(2, 2, 3, 100), (2, 1, [3, 3], 104), (2, 1, [3, 3], 108)]


def test_samples_a_sync_stopped_at_different_counts_continue_in_one_call():
    """A stopped chunk (finish reason None) leaves 1, 3 and 0 tokens: the next chunk is one
    engine call with each sample's own budget, and min_tokens counts what each has."""
    r = PartialRollout([[1], [2], [3]], n=1, max_tokens=8, chunk=8, min_tokens=2)
    [first] = r.next_calls(seed=10)
    r.record(first, answer([[4], [5, 6, 7], []], [[-1.], [-1.] * 3, []], [None] * 3), 0)
    r.end_chunk()
    assert r.pending() == [0, 1, 2]
    [call] = r.next_calls(seed=10)
    assert call.samples == [0, 1, 2] and call.n == 1
    assert call.prompts == [[1, 4], [2, 5, 6, 7], [3]]
    assert call.overrides == {"max_tokens": [7, 5, 8], "min_tokens": [1, 0, 2], "seed": 13}
    r.record(call, answer([[EOS], [8, 9, 10, 11, 12], [EOS]], [[-1.], [-1.] * 5, [-1.]],
                          ["stop", "length", "stop"]), 1)
    r.end_chunk()
    assert r.done and r.output().response_token_ids == [[4, EOS], [5, 6, 7, 8, 9, 10, 11, 12],
                                                        [EOS]]
    assert r.versions() == [[0, 1], [0, 0, 0, 1, 1, 1, 1, 1], [1]]


def test_crossed_update_frac_counts_samples_spanning_versions_under_the_mask():
    versions = torch.tensor([[3, 3, 4], [3, 3, 3], [5, 0, 0], [2, 3, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 0, 0]])
    assert crossed_update_frac(versions, mask) == 0.25
    assert crossed_update_frac(versions[:0], mask[:0]) == 0.0


def test_a_whole_generation_s_tokens_carry_its_version_and_the_padding_0():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    versions = whole_generation_versions(torch.tensor([4, 5, 0]), mask)
    assert versions.tolist() == [[4, 4, 0], [5, 0, 0], [0, 0, 0]]
    assert versions.dtype == torch.long and crossed_update_frac(versions, mask) == 0.0
