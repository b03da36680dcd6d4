"""A reward model's output layer: hidden state -> one score per token (HF ``score``).

It replaces GPTModel's vocab-parallel ``output_layer`` on the last pipeline stage. The
[1, hidden] weight is too small to split over TP, so every TP rank holds all of it and computes
the full score (under sequence parallelism it first gathers the sequence). The sequence's
score is taken at its last token by the engine, as HF's ForSequenceClassification does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ScalarHead(torch.nn.Module):
    """Drop-in for ColumnParallelLinear in GPTModel._postprocess: returns (scores, None)."""

    def __init__(self, config):
        super().__init__()
        self.sequence_parallel = config.sequence_parallel
        weight = torch.empty(1, config.hidden_size, dtype=config.params_dtype)
        if config.perform_initialization:
            # The default generator is seeded alike on every TP rank: replicas agree.
            config.init_method(weight)
        self.weight = torch.nn.Parameter(weight)

    def forward(self, hidden: torch.Tensor, weight=None, runtime_gather_output=None):
        """hidden [s(/TP), b, h] -> scores [s, b, 1]. ``weight`` (a tied embedding) is never
        passed: a scalar head is never tied."""
        if self.sequence_parallel:
            from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

            # Every rank computes the whole sequence with the whole weight: no partial sums.
            hidden = gather_from_sequence_parallel_region(hidden,
                                                          tensor_parallel_output_grad=False)
        return F.linear(hidden, self.weight), None
