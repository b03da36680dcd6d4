"""Forward passes through Megatron's pipeline schedules (any TP/PP), forward-only.

The schedule moves activations between stages; the last stage applies `on_output` to each
micro batch's vocab-parallel logits and the results come back in micro-batch order.
"""

from __future__ import annotations

from typing import Any, Callable, List

import torch


def _position_ids(tokens: torch.Tensor) -> torch.Tensor:
    return torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)


def run_schedule(model, micro_batches: List[dict], seq_length: int, forward_only: bool,
                 on_output: Callable[[torch.Tensor, dict], Any]) -> List[Any]:
    """One pass of Megatron's pipeline schedule over micro batches (dicts with "tokens", and
    optionally "position_ids" and "packed_seq_params": a packed row, data/rows/packed.py).

    on_output(logits_vocab_parallel [mb, S, V/TP], micro) runs on the last stage: forward-only
    its results are collected; in training it returns (loss, metrics) and the schedule runs
    the backward pass. Returns the last stage's collected values ([] elsewhere).
    """
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    data = iter(micro_batches)

    def forward_step(data_iterator, stage):
        micro = next(data_iterator)
        packed = micro.get("packed_seq_params")
        if "image_grid_thw" in micro:
            # A multimodal family makes its own [3, B, S] positions from tokens and grids.
            out = stage(micro["tokens"], None, None, pixel_values=micro.get("pixel_values"),
                        image_grid_thw=micro["image_grid_thw"],
                        prompt_lengths=micro.get("prompt_lengths"), packed_seq_params=packed)
        else:
            positions = micro.get("position_ids")
            out = stage(micro["tokens"],
                        _position_ids(micro["tokens"]) if positions is None else positions,
                        None, packed_seq_params=packed)

        def last_stage(output, non_loss_data=False):
            return on_output(output, micro)

        return out, last_stage

    results = get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=data, model=[model],
        num_microbatches=len(micro_batches), seq_length=seq_length,
        micro_batch_size=micro_batches[0]["tokens"].shape[0], forward_only=forward_only,
        collect_non_loss_data=forward_only)
    return results if parallel_state.is_pipeline_last_stage() else []


def pipeline_forward(model, tokens: torch.Tensor, micro_batch_size: int,
                     on_output: Callable[[torch.Tensor, dict], Any]) -> List[Any]:
    """Run tokens [B, S] through the (stage of the) model in micro batches, no grad."""
    batch = tokens.shape[0]
    if batch % micro_batch_size:
        raise ValueError(f"batch {batch} is not a multiple of micro_batch_size {micro_batch_size}")
    micro = [{"tokens": t} for t in tokens.split(micro_batch_size)]
    with torch.no_grad():
        return run_schedule(model, micro, tokens.shape[1], True, on_output)


def gather_vocab_parallel(logits: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary logits from the TP shards (tests and debugging only: O(V) per rank)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    if parallel_state.get_tensor_model_parallel_world_size() == 1:
        return logits
    return gather_from_tensor_model_parallel_region(logits)
