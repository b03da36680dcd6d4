"""The padded layout: each sample one right-padded row `prompt_valid ++ response` from
position 0, every row as long as the micro batches' longest (causal attention and no padding
mask: trailing padding is never attended by a real token, so the log-probs are exact)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
