"""The row seam (data/rows/micro.py) reads response_mask for what is real and loss_mask for
what is trained: a response with holes in its loss mask (an episode's inserted tokens) packs
and pads exactly as the same response without holes, and only the vocabulary maths' entries
(`response_index`) leave the inserted tokens out."""

import pytest
import torch

from mindrl.data.batch import Batch, left_pad, right_pad
from mindrl.data.rows import micro_batches

PAD = 0
PROMPTS = [[5, 6, 7], [8, 9], [10]]
RESPONSES = [[11, 12, 13, 14, 15], [16, 17, 18], [19, 20, 21, 22]]
HOLES = [[1, 0, 0, 1, 1], [1, 1, 1], [1, 0, 1, 1]]     # 0: inserted (a tool's answer)


def _batch(loss_rows):
    prompt_ids, prompt_mask = left_pad(PROMPTS, PAD)
    ids, mask = right_pad(RESPONSES, PAD)
    loss_mask, _ = right_pad(loss_rows, 0, ids.shape[1])
    return Batch.of(PAD, prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                    group_id=torch.arange(3), response_ids=ids, response_mask=mask,
                    loss_mask=loss_mask)


@pytest.mark.parametrize("packed", [True, False])
def test_holes_in_the_loss_mask_change_no_row_position_or_length(packed):
    holes = _batch(HOLES)
    whole = _batch([[1] * len(r) for r in RESPONSES])
    plan = [[0, 2], [1]]
    got, got_len = micro_batches(holes, plan, torch.device("cpu"), PAD, packed=packed)
    want, want_len = micro_batches(whole, plan, torch.device("cpu"), PAD, packed=packed)
    assert got_len == want_len
    for g, w in zip(got, want):
        for key in ("tokens", "position_ids", "positions", "last_positions", "prompt_lengths"):
            assert torch.equal(g[key], w[key]), key
        if packed:
            assert torch.equal(g["packed_seq_params"].cu_seqlens_q,
                               w["packed_seq_params"].cu_seqlens_q)
    if packed:
        # the vocabulary maths runs on the trained entries only: 7 of sample 0 and 2's 9
        # real tokens, all 3 of sample 1
        assert got[0]["response_index"].tolist() == [0, 3, 4, 5, 7, 8]
        assert want[0]["response_index"].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
        assert got[1]["response_index"].tolist() == want[1]["response_index"].tolist()


def test_verifiers_read_the_whole_response_and_the_objective_the_trained_part():
    batch = _batch(HOLES)
    assert batch.response_lists() == RESPONSES                 # inserted tokens included
    assert batch.trained_mask().sum(1).tolist() == [3, 3, 3]
    assert _batch(HOLES).without("loss_mask").trained_mask().sum(1).tolist() == [5, 3, 4]
