"""The transformers side of the engine tests: response log-probs / entropies and the GRPO
objective's gradients on an HF model, computed sample by sample with plain torch."""

import torch

from mindrl.algorithms import aggregate_loss, kl_loss, ppo_clip_loss

from support.engine_batch import B, R


def hf_token_stats(model, batch, temperature):
    """Response log-probs and entropies [B, R] from transformers, sample by sample."""
    logps, ents = [], []
    for b in range(B):
        prompt = batch["prompt_ids"][b][batch["prompt_mask"][b].bool()]
        seq = torch.cat([prompt, batch["response_ids"][b]])
        logits = model(seq[None]).logits[0].float() / temperature
        lsm = torch.log_softmax(logits, -1)
        pos = torch.arange(R) + len(prompt) - 1
        logps.append(lsm[pos, batch["response_ids"][b]])
        ents.append(-(lsm.exp() * lsm).sum(-1)[pos])
    return torch.stack(logps), torch.stack(ents)


def hf_grpo_gradients(model, batch, cfg):
    """{HF name: gradient} of the GRPO objective (clipped policy loss + KL - entropy bonus,
    `cfg` a LossConfig) on the HF model, one full-batch backward."""
    model.zero_grad()
    logp, ent = hf_token_stats(model, batch, cfg.temperature)
    mask = batch["response_mask"].float()
    pg, _ = ppo_clip_loss(logp, batch["old_log_probs"], batch["advantages"], mask,
                          clip_ratio=cfg.clip_ratio)
    loss = (pg + cfg.kl_coef * kl_loss(logp, batch["ref_log_probs"], mask, cfg.kl_penalty)
            - cfg.entropy_coeff * aggregate_loss(ent, mask, "token-mean"))
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}
