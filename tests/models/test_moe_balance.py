"""The per-sample balancing loss (models/moe_balance.py) by hand: its value, that padding and
the partition do not enter it, its gradient, and the token -> sample map in Megatron's order.
The engine-level proof (same loss and gradient norm at every layout) is in
tests/engines/test_moe_rl_settings.py."""

import pytest
import torch

from mindrl.models.moe_balance import sample_of_token, sequence_balance_loss


def _top1(scores):
    return torch.zeros_like(scores, dtype=torch.bool).scatter(1, scores.argmax(1, True), True)


def test_hand_computed_value_leaves_padding_out():
    # Sample 0: two tokens to experts 0 and 1; sample 1: one token to expert 2; one padding
    # token whose scores would change everything if counted.
    scores = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.1, 0.6, 0.2, 0.1],
                           [0.2, 0.2, 0.4, 0.2], [0.0, 0.0, 0.0, 1.0]])
    routing = _top1(scores)
    tokens = torch.tensor([0, 0, 1, -1])
    got = sequence_balance_loss(scores, routing, tokens, torch.tensor([2, 1]), topk=1)
    # aux_s = E / (k T_s^2) sum_e c_{s,e} sum_t p_{t,e}
    # sample 0: 4 / 4 * (1 * 0.6 + 1 * 0.8) = 1.4; sample 1: 4 / 1 * (1 * 0.4) = 1.6
    assert float(got) == pytest.approx(3.0, abs=1e-6)


def test_balanced_sample_gives_one_and_collapsed_gives_experts():
    experts, topk = 4, 2
    uniform = torch.full((4, experts), 1 / experts)
    spread = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1]]).bool()
    one = sequence_balance_loss(uniform, spread, torch.zeros(4, dtype=torch.long),
                                torch.tensor([4]), topk)
    assert float(one) == pytest.approx(1.0, abs=1e-6)
    peaked = torch.tensor([[0.5, 0.5, 0.0, 0.0]]).expand(4, -1)
    same = torch.tensor([[1, 1, 0, 0]]).bool().expand(4, -1)
    worst = sequence_balance_loss(peaked, same, torch.zeros(4, dtype=torch.long),
                                  torch.tensor([4]), topk)
    assert float(worst) == pytest.approx(experts / topk, abs=1e-6)


def test_sum_over_any_split_of_samples_is_the_whole():
    g = torch.Generator().manual_seed(0)
    scores = torch.softmax(torch.randn(12, 8, generator=g), -1)
    routing = torch.zeros(12, 8, dtype=torch.bool).scatter(
        1, scores.topk(2, -1).indices, True)
    lengths = torch.tensor([5, 4, 3])
    tokens = torch.repeat_interleave(torch.arange(3), lengths)
    whole = sequence_balance_loss(scores, routing, tokens, lengths, 2)
    # Samples {0} and {1, 2} in two "micro batches": each sees only its tokens.
    first = sequence_balance_loss(scores[:5], routing[:5], tokens[:5], lengths[:1], 2)
    rest = sequence_balance_loss(scores[5:], routing[5:], tokens[5:] - 1, lengths[1:], 2)
    assert float(first + rest) == pytest.approx(float(whole), rel=1e-6)


def test_gradient_is_the_counts_over_squared_length():
    scores = torch.softmax(torch.randn(3, 4), -1).requires_grad_(True)
    routing = _top1(scores.detach())
    lengths = torch.tensor([3])
    sequence_balance_loss(scores, routing, torch.zeros(3, dtype=torch.long), lengths, 1).backward()
    counts = routing.float().sum(0)
    # d/dp_{t,e} = E / (k T^2) c_e for every token t of the sample (counts carry no gradient)
    assert torch.allclose(scores.grad, (4 / 9 * counts).expand(3, -1), atol=1e-6)


def test_sample_of_token_in_megatron_order():
    lengths = torch.tensor([3, 1, 2])
    # Packed: one row, samples back to back, then padding up to 8.
    assert sample_of_token(lengths, True, 8).tolist() == [0, 0, 0, 1, 2, 2, -1, -1]
    # Under sequence parallelism each TP rank holds its slice of the row.
    assert sample_of_token(lengths, True, 8, sp_rank=1, sp_size=2).tolist() == [2, 2, -1, -1]
    # Padded rows [3, S=3] flattened s-major: index s * b + row.
    assert sample_of_token(lengths, False, 3).tolist() == [0, 1, 2, 0, -1, 2, 0, -1, -1]
