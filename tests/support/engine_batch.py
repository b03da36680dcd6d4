"""The engine tests' hand-made padded batch: 4 samples of fixed, mixed prompt and response
lengths (left-padded prompts, right-padded responses), advantages and old / reference
log-probs, for any vocabulary."""

import torch

B, P, R = 4, 5, 6


def make_batch(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.tensor([5, 3, 1, 4])
    response_lengths = torch.tensor([6, 2, 4, 1])
    prompt_mask = (torch.arange(P) >= P - prompt_lengths[:, None]).long()      # left-padded
    response_mask = (torch.arange(R) < response_lengths[:, None]).long()       # right-padded
    prompt_ids = torch.randint(1, vocab, (B, P), generator=g) * prompt_mask
    response_ids = torch.randint(1, vocab, (B, R), generator=g) * response_mask
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
            "response_mask": response_mask,
            "advantages": torch.randn(B, 1, generator=g).expand(B, R) * response_mask,
            "old_log_probs": -torch.rand(B, R, generator=g) * 4,
            "ref_log_probs": -torch.rand(B, R, generator=g) * 4}
