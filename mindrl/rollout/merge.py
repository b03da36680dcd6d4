"""An engine's rollout merged into the step's Batch: the rows must follow the Batch's prompt
groups (n samples each, prompt-major), and the rollout adds response_ids / response_mask /
rollout_log_probs and finish_reason (and rollout_routes when the engine returned routes).

The engine reports the prompt ids it really ran (vLLM's own, image pads expanded by its
processor); they must equal the Batch's `prompt_ids`, which the actor's passes consume. That
is the one place a double expansion (ids an HF processor already expanded, expanded again by
vLLM) or a processor mismatch between the two sides shows, so every merge checks it.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from mindrl.data.batch import Batch


class PromptMismatch(ValueError):
    """vLLM ran other prompt ids than the Batch's: the two sides would train on different
    sequences."""


def rollout_prompts(batch: Batch) -> Tuple[List[List[int]], Optional[List[tuple]]]:
    """Per prompt group: the ids to send an engine (one `<|image_pad|>` per image where the
    batch has images) and the group's images (None for a text batch)."""
    if "rollout_prompt_ids" not in batch:
        return batch.prompts(), None
    first = {}
    for row, group in enumerate(batch["group_id"].tolist()):
        first.setdefault(group, row)
    rows = list(first.values())
    return ([list(batch["rollout_prompt_ids"][r]) for r in rows],
            [tuple(batch["images"][r]) for r in rows])


def _check_prompts(batch: Batch, engine_prompts: List[List[int]]) -> None:
    for group, (ours, theirs) in enumerate(zip(batch.prompts(), engine_prompts)):
        if list(ours) != list(theirs):
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                         min(len(ours), len(theirs)))
            raise PromptMismatch(
                f"prompt group {batch.group_ids[group]} of the step: vLLM ran {len(theirs)} prompt tokens, the batch "
                f"holds {len(ours)} (first difference at token {first}); vLLM expands each "
                f"<|image_pad|> itself, so rollout ids must carry one pad per image, and both "
                f"sides must use the same processor and pixel bounds")


def with_rollout(batch: Batch, rollout, n: int) -> Batch:
    """`batch` (n rows per prompt) plus an engine's rollout of its prompts (prompt-major, n
    samples each): response_ids / response_mask / rollout_log_probs and finish_reason, after
    checking the engine ran the batch's prompt ids."""
    expected = [i for i in range(len(batch.group_ids)) for _ in range(n)]
    if list(rollout.prompt_index) != expected:
        raise ValueError(f"rollout rows {rollout.prompt_index[:8]}... do not follow the batch's "
                         f"prompt groups ({n} samples each)")
    _check_prompts(batch, [rollout.prompt_token_ids[i * n] for i in range(len(batch.group_ids))])
    routes = getattr(rollout, "routes", None)
    extra = {} if routes is None else {"rollout_routes": routes_tensor(routes)}
    return batch.add(**rollout.response_tensors(batch.pad_id),
                     finish_reason=rollout.finish_reasons, **extra)


def routes_tensor(routes: List[torch.Tensor]) -> torch.Tensor:
    """Per-sample routes [T_i, L, K] -> [B, max T_i, L, K], right-padded with 0 (past a
    sample's tokens: never read)."""
    width = max(r.shape[0] for r in routes)
    out = torch.zeros((len(routes), width, *routes[0].shape[1:]), dtype=torch.long)
    for i, r in enumerate(routes):
        out[i, :r.shape[0]] = r
    return out
