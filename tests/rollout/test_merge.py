import pytest

from mindrl.data.batch import Batch
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.merge import PromptMismatch, rollout_prompts, with_rollout

PAD = 9


def test_a_rollout_out_of_group_order_is_refused():
    b = Batch.from_prompts([[1], [2]], 1, PAD)
    out = RolloutOutput([], [[3], [4]], [[0.0], [0.0]], ["stop"] * 2, [1, 0])
    with pytest.raises(ValueError, match="do not follow the batch's prompt groups"):
        with_rollout(b, out, 1)


def _rollout(prompts, n):
    rows = [p for p in prompts for _ in range(n)]
    return RolloutOutput(rows, [[3]] * len(rows), [[0.0]] * len(rows), ["stop"] * len(rows),
                         [i for i in range(len(prompts)) for _ in range(n)])


def test_engine_prompt_ids_must_equal_the_batch_s():
    """vLLM reports the ids it ran (image pads expanded); a double expansion shows as a longer
    prompt and stops the merge naming the prompt group and the first differing token."""
    IMG = 7
    b = Batch.from_prompts([[1, IMG, IMG, 2], [1, 2]], 2, PAD)   # expanded: 2 slots
    with_rollout(Batch.from_prompts([[1, IMG, IMG, 2], [1, 2]], 2, PAD),
                 _rollout([[1, IMG, IMG, 2], [1, 2]], 2), 2)
    with pytest.raises(PromptMismatch, match=r"prompt group 0 .* 6 prompt tokens, the batch "
                                             r"holds 4 \(first difference at token 3\)"):
        with_rollout(b, _rollout([[1, IMG, IMG, IMG, IMG, 2], [1, 2]], 2), 2)


def test_rollout_prompts_send_one_pad_per_image_and_the_group_s_images():
    b = Batch.from_prompts([[1, 7, 7, 2], [5]], 3, PAD, rollout_prompt_ids=[[1, 7, 2], [5]],
                           images=[(b"png-a",), ()])
    assert rollout_prompts(b) == ([[1, 7, 2], [5]], [(b"png-a",), ()])
    assert rollout_prompts(b.select_groups([1])) == ([[5]], [()])
    assert rollout_prompts(Batch.from_prompts([[4, 5]], 2, PAD)) == ([[4, 5]], None)
