"""Forward passes through Megatron's pipeline schedules (any TP/PP), forward-only.

The schedule moves activations between stages; the last stage applies `on_output` to each
micro batch's vocab-parallel logits and the results come back in micro-batch order.
"""

from __future__ import annotations

from typing import Any, Callable, List

import torch


def _position_ids(tokens: torch.Tensor) -> torch.Tensor:
    return torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)


def pipeline_forward(model, tokens: torch.Tensor, micro_batch_size: int,
                     on_output: Callable[[torch.Tensor, dict], Any],
                     extras: dict | None = None) -> List[Any]:
    """Run tokens [B, S] through the (stage of the) model in micro batches, no grad.

    on_output(logits_vocab_parallel [mb, S, V/TP], micro_extras) runs on the last stage;
    other stages return an empty list.
    """
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    extras = extras or {}
    batch, seq = tokens.shape
    if batch % micro_batch_size:
        raise ValueError(f"batch {batch} is not a multiple of micro_batch_size {micro_batch_size}")
    chunks = [{"tokens": t, **{k: v[i * micro_batch_size:(i + 1) * micro_batch_size]
                               for k, v in extras.items()}}
              for i, t in enumerate(tokens.split(micro_batch_size))]
    data = iter(chunks)

    def forward_step(data_iterator, stage):
        micro = next(data_iterator)
        out = stage(micro["tokens"], _position_ids(micro["tokens"]), None)

        def collect(output, non_loss_data=True):
            return on_output(output, micro)

        return out, collect

    with torch.no_grad():
        results = get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=data, model=[model],
            num_microbatches=len(chunks), seq_length=seq, micro_batch_size=micro_batch_size,
            forward_only=True, collect_non_loss_data=True)
    return results if parallel_state.is_pipeline_last_stage() else []


def gather_vocab_parallel(logits: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary logits from the TP shards (tests and debugging only: O(V) per rank)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    if parallel_state.get_tensor_model_parallel_world_size() == 1:
        return logits
    return gather_from_tensor_model_parallel_region(logits)
