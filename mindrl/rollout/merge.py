"""An engine's rollout merged into the step's Batch: the rows must follow the Batch's prompt
groups (n samples each, prompt-major), and the rollout adds response_ids / response_mask /
rollout_log_probs and finish_reason."""

from __future__ import annotations

from mindrl.data.batch import Batch


def with_rollout(batch: Batch, rollout, n: int) -> Batch:
    """`batch` (n rows per prompt) plus an engine's rollout of its prompts (prompt-major, n
    samples each): response_ids / response_mask / rollout_log_probs and finish_reason."""
    expected = [i for i in range(len(batch.group_ids)) for _ in range(n)]
    if list(rollout.prompt_index) != expected:
        raise ValueError(f"rollout rows {rollout.prompt_index[:8]}... do not follow the batch's "
                         f"prompt groups ({n} samples each)")
    return batch.add(**rollout.response_tensors(batch.pad_id),
                     finish_reason=rollout.finish_reasons)

