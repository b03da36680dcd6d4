import pytest

from mindrl.data.batch import Batch
from mindrl.engines.vllm_engine import RolloutOutput
from mindrl.rollout.merge import with_rollout

PAD = 9


def test_a_rollout_out_of_group_order_is_refused():
    b = Batch.from_prompts([[1], [2]], 1, PAD)
    out = RolloutOutput([], [[3], [4]], [[0.0], [0.0]], ["stop"] * 2, [1, 0])
    with pytest.raises(ValueError, match="do not follow the batch's prompt groups"):
        with_rollout(b, out, 1)
