"""The step's Batch: built from prompts (n rows per group), split by group and merged back
with re-padding on each field's side, fields written once, rollouts attached in order."""

import pytest
import torch

from mindrl.data.batch import Batch
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.merge import with_rollout

PAD = 9


def _prompts():
    return Batch.from_prompts([[1, 2, 3], [4], [5, 6]], 2, PAD, label=["a", "b", "c"],
                              numbers=[[1], [2], [3]])


def test_from_prompts_repeats_each_prompt_left_padded_with_its_group():
    b = _prompts()
    assert len(b) == 6 and b.samples_per_group() == 2
    assert b["group_id"].tolist() == [0, 0, 1, 1, 2, 2]
    assert b["prompt_ids"].tolist()[2] == [PAD, PAD, 4]
    assert b["prompt_mask"].tolist()[2] == [0, 0, 1]
    assert b["label"] == ["a", "a", "b", "b", "c", "c"]
    assert b["numbers"][4] == [3]
    assert b.prompts() == [[1, 2, 3], [4], [5, 6]]
    with pytest.raises(ValueError, match="numbers: 2 values for 3 prompts"):
        Batch.from_prompts([[1], [2], [3]], 1, PAD, numbers=[1, 2])


def test_a_field_is_written_once_with_one_row_per_sample():
    b = _prompts()
    b.add(scores=torch.zeros(6))
    with pytest.raises(KeyError, match="'scores' is already set"):
        b.add(scores=torch.ones(6))
    with pytest.raises(ValueError, match="'advantages' has 5 rows, the batch 6"):
        b.add(advantages=torch.zeros(5, 3))
    with pytest.raises(KeyError, match="no field 'ref_log_probs'"):
        b["ref_log_probs"]


def test_split_by_group_and_concat_round_trip_with_repadding():
    b = _prompts()
    parts = b.split_groups(2)
    assert [p["group_id"].tolist() for p in parts] == [[0, 0, 1, 1], [2, 2]]
    assert parts[1]["prompt_ids"].shape[1] == 3          # still the batch's width here
    narrow = Batch.from_prompts([[7]], 2, PAD, label=["z"], numbers=[[0]])
    narrow.tensors["group_id"] += 5
    merged = Batch.concat([parts[0], narrow])
    assert merged["prompt_ids"].tolist()[4] == [PAD, PAD, 7]      # prompts pad on the left
    assert merged["prompt_mask"].tolist()[4] == [0, 0, 1]
    back = Batch.concat(parts)
    for key in b.tensors:
        assert torch.equal(back[key], b[key]), key
    assert back.meta == b.meta
    assert [len(p) for p in b.split_groups(4)] == [2, 2, 2, 0]   # idle parts are empty


def test_concat_pads_responses_on_the_right_and_can_renumber_groups():
    b = _prompts()
    out = RolloutOutput([p for p in b.prompts() for _ in range(2)],
                        [[1, 2], [3], [4, 5, 6], [7], [8], [9, 9]],
                        [[-1.0, -2.0], [-3.0], [-4.0, -5.0, -6.0], [-7.0], [-8.0], [-9.0, -9.0]],
                        ["stop"] * 6, [0, 0, 1, 1, 2, 2])
    with_rollout(b, out, 2)
    first, last = b.select_groups([2]), b.select_groups([0])
    first.tensors = {k: (v[:, :2] if k.startswith(("response", "rollout")) else v)
                     for k, v in first.tensors.items()}          # a narrower part
    merged = Batch.concat([first, last], renumber_groups=True)
    assert merged["group_id"].tolist() == [0, 0, 1, 1]
    assert merged["response_ids"].tolist()[0] == [8, PAD, PAD]   # responses pad on the right
    assert merged["response_mask"].tolist()[0] == [1, 0, 0]
    assert merged["rollout_log_probs"].tolist()[1] == [-9.0, -9.0, 0.0]
    assert merged.response_lists()[2:] == [[1, 2], [3]]
    assert merged["label"] == ["c", "c", "a", "a"]
