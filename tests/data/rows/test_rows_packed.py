"""The packed layout (data/rows/packed.py), checked by hand."""

import torch

from mindrl.data.rows import packed


def test_sample_lengths_count_the_valid_prompt_and_the_response_through_its_last_token():
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    assert packed.sample_lengths(prompt_mask, response_mask).tolist() == [4, 6, 1]


def test_packed_row_lays_samples_back_to_back_with_a_tail_entry():
    prompt_ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    response_ids = torch.tensor([[11, 12, 0], [13, 0, 0]])
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    rows = packed.packed_rows(prompt_ids, prompt_mask, response_ids, response_mask,
                              pad_id=0, multiple_of=4)
    assert rows.tokens.tolist() == [[5, 6, 11, 12, 7, 8, 9, 13]]
    assert rows.cu_seqlens.tolist() == [0, 4, 8] and rows.max_seqlen == 4
    assert rows.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    # Logit predicting response token t: prompt end - 1 + t, kept inside the sample.
    assert rows.response_positions().tolist() == [[1, 2, 3], [6, 7, 7]]
    assert rows.last_positions().tolist() == [3, 7]
    padded = packed.packed_rows(prompt_ids, prompt_mask, response_ids, response_mask,
                                pad_id=0, pad_to=11)
    assert padded.tokens.shape == (1, 11)
    assert padded.cu_seqlens.tolist() == [0, 4, 8, 11]   # the tail is its own sequence
