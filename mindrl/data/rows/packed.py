"""The packed layout: a micro batch as one row of its samples' real tokens with cumulative
sequence lengths, Megatron's "thd" layout, and `sample_lengths`, the real tokens a packed row
holds per sample (what a token-budget plan counts).

A sample's length is its real tokens: the valid prompt plus the response up to its last
unmasked token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


def sample_lengths(prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] real tokens per sample: valid prompt + response through its last unmasked token."""
    prompt = prompt_mask.sum(dim=1).long()
    width = response_mask.shape[1]
    column = torch.arange(1, width + 1, device=response_mask.device)
    response = (response_mask.bool() * column).amax(dim=1).long() if width else prompt * 0
    return prompt + response


@dataclass
class PackedRows:
    """One micro batch as a single row of real tokens ("thd": total tokens, heads, dim)."""

    tokens: torch.Tensor          # [1, T] the samples' prompt ++ response, back to back
    position_ids: torch.Tensor    # [1, T] 0.. within each sample
    cu_seqlens: torch.Tensor      # [n + 1] int32, or [n + 2] with a padding tail entry
    max_seqlen: int               # the longest entry, the tail included (RoPE's table size)
    starts: torch.Tensor          # [n] each sample's first index in the row
    prompt_lengths: torch.Tensor  # [n] valid prompt tokens per sample
    lengths: torch.Tensor         # [n] real tokens per sample
    response_length: int          # R of the Batch's response fields

    def response_positions(self) -> torch.Tensor:
        """[n, R] index in the row of the logit predicting response token t; positions past a
        sample's last real token stay inside it (masked by response_mask in the loss)."""
        t = torch.arange(self.response_length, device=self.tokens.device)
        last = (self.starts + self.lengths - 1).unsqueeze(1)
        first = (self.starts + self.prompt_lengths - 1).unsqueeze(1)
        return torch.minimum(first + t.unsqueeze(0), last)

    def last_positions(self) -> torch.Tensor:
        """[n] index of each sample's last real token (where a reward model's score is read)."""
        return self.starts + self.lengths - 1


def packed_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor,
                response_mask: torch.Tensor, pad_id: int = 0, multiple_of: int = 1,
                pad_to: Optional[int] = None) -> PackedRows:
    """Left-padded prompts + right-padded responses -> one packed row.

    The row is padded at its end to a multiple of `multiple_of` (TP under sequence parallel)
    or to `pad_to` (a pipeline's common shape); the padding is its own cu_seqlens entry, so no
    sample attends to it and RoPE sees whole sequences.
    """
    prompt_lengths = prompt_mask.sum(dim=1).long()
    if (prompt_lengths == 0).any():
        raise ValueError("a sample has an empty prompt: every prompt needs at least one token")
    lengths = sample_lengths(prompt_mask, response_mask)
    device = prompt_ids.device
    # Row-major selection keeps each sample's valid prompt then its response, sample by sample.
    response_keep = (torch.arange(response_ids.shape[1], device=device)
                     < (lengths - prompt_lengths)[:, None])
    keep = torch.cat([prompt_mask.bool(), response_keep], dim=1)
    tokens = torch.cat([prompt_ids, response_ids.to(prompt_ids.dtype)], dim=1)[keep]
    total = int(lengths.sum())
    padded = max(pad_to or 0, -(-total // multiple_of) * multiple_of)
    if padded % multiple_of:
        raise ValueError(f"pack length {padded} is not a multiple of {multiple_of}")
    tail = padded - total
    bounds = torch.cat([lengths, lengths.new_tensor([tail] if tail else [])])
    cu_seqlens = torch.zeros(len(bounds) + 1, dtype=torch.int32, device=device)
    cu_seqlens[1:] = torch.cumsum(bounds, 0)
    # Each token's place in its own sequence (the tail counts as one more sequence).
    sequence_starts = cu_seqlens[:-1].long()
    positions = (torch.arange(padded, device=device)
                 - torch.repeat_interleave(sequence_starts, bounds))
    if tail:
        tokens = torch.cat([tokens, torch.full((tail,), pad_id, dtype=tokens.dtype,
                                               device=device)])
    starts = sequence_starts[:len(lengths)]
    return PackedRows(tokens.unsqueeze(0), positions.unsqueeze(0),
                      cu_seqlens, max(int(lengths.max()), tail), starts, prompt_lengths, lengths,
                      response_ids.shape[1])
