"""Two masks, one contract (data/batch.FIELDS): the objective reads `loss_mask` (the trained
tokens) and nothing else of a response's tokens. A batch with holes in its loss mask (an
episode's inserted tokens) must give the loss, gradients, importance weights and drift metric
of the same batch with the held-out tokens cut out by hand."""

import pytest
import torch

from mindrl.algorithms.objective import micro_batch_loss, mini_batch_weight, trained_tokens
from mindrl.config.roles import LossConfig

R = 7
# Sample 0: 7 real tokens, 2 and 3 inserted; sample 1: 5 real, 1 inserted; sample 2: 4 real.
RESPONSE_MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0],
                              [1, 1, 1, 1, 0, 0, 0]])
LOSS_MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 1], [1, 0, 1, 1, 1, 0, 0],
                          [1, 1, 1, 1, 0, 0, 0]])


def _fields(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shape = RESPONSE_MASK.shape
    return {"log_probs": -torch.rand(shape, generator=g) * 2,
            "old_log_probs": -torch.rand(shape, generator=g) * 2,
            "ref_log_probs": -torch.rand(shape, generator=g) * 2,
            "rollout_log_probs": -torch.rand(shape, generator=g) * 2,
            "advantages": torch.randn(shape, generator=g),
            "entropy": torch.rand(shape, generator=g) * 3}


def _cut(values: torch.Tensor) -> torch.Tensor:
    """Each row's trained tokens only, moved left and right-padded with 0 (what the batch
    would be had the inserted tokens never been there)."""
    out = torch.zeros_like(values)
    for row in range(values.shape[0]):
        kept = values[row][LOSS_MASK[row].bool()]
        out[row, :kept.numel()] = kept
    return out


def _cut_mask() -> torch.Tensor:
    counts = LOSS_MASK.sum(1)
    return (torch.arange(R).unsqueeze(0) < counts.unsqueeze(1)).long()


def _loss(fields, mask_fields, cfg):
    log_probs = fields["log_probs"].clone().requires_grad_(True)
    entropy = fields["entropy"].clone().requires_grad_(True)
    micro = {**mask_fields, **{k: fields[k] for k in
                               ("old_log_probs", "ref_log_probs", "rollout_log_probs",
                                "advantages")}}
    weight = mini_batch_weight(trained_tokens(micro).float(), cfg.loss_agg_mode)
    loss, parts = micro_batch_loss(log_probs, entropy, micro, cfg, weight, 1, 1)
    loss.backward()
    return loss, {k: v.item() for k, v in parts.items()}, log_probs.grad, entropy.grad


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("rollout_is", ["off", "token"])
def test_holes_in_the_loss_mask_equal_the_tokens_cut_out_by_hand(agg, rollout_is):
    cfg = LossConfig(kl_penalty="low_var_kl", use_kl_loss=True, kl_coef=0.1,
                     entropy_coeff=0.05, loss_agg_mode=agg, rollout_is=rollout_is,
                     rollout_is_cap=1.5)
    fields = _fields()
    holes = _loss(fields, {"response_mask": RESPONSE_MASK, "loss_mask": LOSS_MASK}, cfg)
    cut = _loss({k: _cut(v) for k, v in fields.items()}, {"response_mask": _cut_mask()}, cfg)
    assert holes[0].item() == pytest.approx(cut[0].item(), rel=1e-6, abs=1e-7)
    # every part: pg, KL, entropy, clip fraction, IS weights and the drift metric
    assert holes[1].keys() == cut[1].keys()
    assert holes[1] == pytest.approx(cut[1], rel=1e-6, abs=1e-7)
    if rollout_is == "token":
        assert cut[1]["rollout/is_count"] == LOSS_MASK.sum().item()
    assert holes[1]["rollout/logprob_diff_count"] == LOSS_MASK.sum().item()
    # the gradients at the trained tokens are the cut batch's; 0 at the inserted ones
    for got, want in ((holes[2], cut[2]), (holes[3], cut[3])):
        assert torch.allclose(_cut(got), want, atol=1e-7)
        assert got[(RESPONSE_MASK - LOSS_MASK).bool()].abs().max().item() == 0.0


def test_the_response_mask_alone_no_longer_decides_what_is_trained():
    """The same batch with the loss mask equal to the response mask trains more tokens: the
    loss differs (a reader of response_mask in the objective would not see the holes)."""
    cfg = LossConfig(kl_penalty="kl", use_kl_loss=True, kl_coef=0.1)
    fields = _fields(1)
    holes = _loss(fields, {"response_mask": RESPONSE_MASK, "loss_mask": LOSS_MASK}, cfg)
    full = _loss(fields, {"response_mask": RESPONSE_MASK, "loss_mask": RESPONSE_MASK}, cfg)
    assert holes[0].item() != pytest.approx(full[0].item(), abs=1e-4)
    assert mini_batch_weight(LOSS_MASK.float(), "token-mean").item() == 13
    assert mini_batch_weight(RESPONSE_MASK.float(), "token-mean").item() == 16


def test_a_batch_without_a_loss_mask_trains_every_real_token():
    assert trained_tokens({"response_mask": RESPONSE_MASK}) is RESPONSE_MASK
    assert trained_tokens({"response_mask": RESPONSE_MASK, "loss_mask": LOSS_MASK}) is LOSS_MASK
