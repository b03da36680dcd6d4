"""Rollout layout <-> model layout for Megatron forward passes.

Rollouts arrive as left-padded prompts [B, P] and right-padded responses [B, R]. Megatron runs
causal attention with no padding mask, so each sample is re-packed as one right-padded row
`prompt_valid ++ response` starting at position 0: trailing padding can never be attended by a
real token, so the logprobs are exact without any attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedSequences:
    tokens: torch.Tensor          # [B, L] right-padded
    prompt_lengths: torch.Tensor  # [B] valid prompt tokens per sample
    response_length: int          # R

    def response_positions(self) -> torch.Tensor:
        """[B, R] index of the logit that predicts response token t (position len_p + t - 1)."""
        t = torch.arange(self.response_length, device=self.tokens.device)
        return self.prompt_lengths.unsqueeze(1) - 1 + t.unsqueeze(0)


def pack(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor,
         pad_id: int = 0, multiple_of: int = 1) -> PackedSequences:
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
    return PackedSequences(tokens, prompt_lengths, response_length)


def next_token_targets(tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """targets[:, j] = tokens[:, j + 1] (the last position predicts padding, ignored)."""
    return torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], pad_id)], dim=1)


def select_response(per_position: torch.Tensor, packed: PackedSequences) -> torch.Tensor:
    """Per-position values [B, L] -> per-response-token values [B, R]."""
    return torch.gather(per_position, 1, packed.response_positions())
