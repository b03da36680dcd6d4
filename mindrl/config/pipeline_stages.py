"""How a decoder's layers spread over pipeline stages: one function every reader asks.

Megatron splits the layers evenly over PP. A model whose layer count PP does not divide
(Qwen3-235B-A22B: 94 layers on MindSpeed-RL's 16 stages) gives its first and/or last stage a
count of its own and splits the rest evenly over the stages between (megatron-core's
num_layers_in_first/last_pipeline_stage, Megatron-LM's --decoder-first/last-pipeline-num-layers;
MindSpeed-RL reaches the same stages by padding the model with no-op layers). The builder,
the checkpoint tables, the converter's checks and the weight sync all read the split here, so
a stage holds the same layers for each of them.
"""

from __future__ import annotations

from typing import Optional


def split_problem(num_layers: int, pp: int, first: Optional[int] = None,
                  last: Optional[int] = None) -> Optional[str]:
    """Why these stages cannot hold num_layers (Megatron's rules), or None when they can."""
    if first is None and last is None:
        if num_layers % pp:
            return f"{pp} stages do not split {num_layers} layers evenly"
        return None
    if pp < 2:
        return "a first or last stage of its own needs pipeline_model_parallel_size >= 2"
    for name, count in (("first", first), ("last", last)):
        if count is not None and count < 1:
            return f"the {name} stage's layer count must be at least 1, got {count}"
    middle_stages = pp - (first is not None) - (last is not None)
    middle_layers = num_layers - (first or 0) - (last or 0)
    if middle_layers < 0 or bool(middle_layers) != bool(middle_stages):
        return (f"{num_layers} layers leave {middle_layers} for the {middle_stages} stages "
                f"between the first and the last")
    if middle_stages and middle_layers % middle_stages:
        return (f"the {middle_layers} layers between the first and the last stage do not "
                f"split evenly over the {middle_stages} stages there")
    return None


def stage_layer_counts(num_layers: int, pp: int, first: Optional[int] = None,
                       last: Optional[int] = None) -> list[int]:
    """Layers per stage, first to last (ValueError naming why when the split does not fit)."""
    problem = split_problem(num_layers, pp, first, last)
    if problem:
        raise ValueError(problem)
    middle_stages = pp - (first is not None) - (last is not None)
    middle = (num_layers - (first or 0) - (last or 0)) // middle_stages if middle_stages else 0
    counts = [middle] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def stage_layer_range(num_layers: int, stage: int, pp: int, first: Optional[int] = None,
                      last: Optional[int] = None) -> range:
    """The global (0-based) layer numbers a stage holds."""
    counts = stage_layer_counts(num_layers, pp, first, last)
    start = sum(counts[:stage])
    return range(start, start + counts[stage])
