"""The one seam between the step's Batch and Megatron's model inputs.

Rollouts arrive as left-padded prompts [B, P] and right-padded responses [B, R]. Megatron runs
causal attention with no padding mask, so each sample becomes one right-padded row
`prompt_valid ++ response` starting at position 0: trailing padding can never be attended by a
real token, so the log-probs are exact without any attention mask. `micro_batches` cuts a
(DP-local) Batch into the dicts the forward schedule consumes, each on this rank's device:
the rows' tokens, the logit position of every response token, each row's prompt length
(a multimodal model places image features in the prompt only), and the Batch's fields for
those samples (tensors sliced, per-sample lists such as images picked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import torch

from mindrl.data.batch import Batch


@dataclass
class PaddedRows:
    tokens: torch.Tensor          # [B, L] right-padded prompt ++ response
    prompt_lengths: torch.Tensor  # [B] valid prompt tokens per sample
    response_length: int          # R

    def response_positions(self) -> torch.Tensor:
        """[B, R] index of the logit that predicts response token t (position len_p + t - 1)."""
        t = torch.arange(self.response_length, device=self.tokens.device)
        return self.prompt_lengths.unsqueeze(1) - 1 + t.unsqueeze(0)


def padded_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                response_ids: torch.Tensor, pad_id: int = 0,
                multiple_of: int = 1) -> PaddedRows:
    """Left-padded prompts + right-padded responses -> right-padded rows (length a multiple of
    `multiple_of`, e.g. TP size for sequence parallel)."""
    batch, _ = prompt_ids.shape
    response_length = response_ids.shape[1]
    prompt_lengths = prompt_mask.sum(dim=1).long()
    if (prompt_lengths == 0).any():
        raise ValueError("a sample has an empty prompt: every prompt needs at least one token")
    length = int(prompt_lengths.max()) + response_length
    length = -(-length // multiple_of) * multiple_of
    tokens = torch.full((batch, length), pad_id, dtype=prompt_ids.dtype, device=prompt_ids.device)
    for b in range(batch):
        valid = prompt_ids[b][prompt_mask[b].bool()]
        n = valid.numel()
        tokens[b, :n] = valid
        tokens[b, n:n + response_length] = response_ids[b]
    return PaddedRows(tokens, prompt_lengths, response_length)


def next_token_targets(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """targets[:, j] = tokens[:, j + 1] (the last position predicts padding, ignored)."""
    return torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], pad_id)], dim=1)


def _to(value, target: torch.device):
    """A field's value on the rank's device: tensors moved, per-sample lists element-wise."""
    if isinstance(value, torch.Tensor):
        return value.to(target, non_blocking=True)
    if isinstance(value, list):
        return [_to(v, target) for v in value]
    return value


def micro_batches(batch: Batch, micro_batch_size: int, target: torch.device, pad_id: int = 0,
                  multiple_of: int = 1) -> tuple[List[Dict[str, object]], int]:
    """The schedule's micro batches for `batch` (its rows in order) and their common sequence
    length (every micro batch is padded to the batch's longest row: pipeline stages exchange
    tensors of one shape)."""
    n = len(batch)
    if n % micro_batch_size:
        raise ValueError(f"{n} samples per DP rank do not split into micro batches of "
                         f"{micro_batch_size}")
    rows = padded_rows(batch["prompt_ids"], batch["prompt_mask"], batch["response_ids"],
                       pad_id=pad_id, multiple_of=multiple_of)
    positions = rows.response_positions()
    out = []
    for start in range(0, n, micro_batch_size):
        part = batch.select(range(start, start + micro_batch_size))
        fields = {**part.tensors, **part.meta,
                  "tokens": rows.tokens[start:start + micro_batch_size],
                  "positions": positions[start:start + micro_batch_size],
                  "prompt_lengths": rows.prompt_lengths[start:start + micro_batch_size]}
        out.append({k: _to(v, target) for k, v in fields.items()})
    return out, int(rows.tokens.shape[1])
