"""models/route_replay.py's conversions and checks: per-sample routes <-> Megatron's
sequence-major order (padded rows, a packed row, a sequence-parallel split), refusals naming
the sample, and route agreement."""

import pytest
import torch

from mindrl.models import route_replay
from mindrl.models.route_replay import UNKNOWN


def _routes(lengths, width, layers=2, top_k=2, experts=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = torch.rand(len(lengths), width, layers, experts, generator=g).argsort(-1)[..., :top_k]
    for i, n in enumerate(lengths):
        out[i, n:] = 0
    return out


def test_padded_rows_are_sequence_major_and_round_trip():
    lengths = torch.tensor([3, 1, 2])
    routes = _routes(lengths.tolist(), 4)
    flat = route_replay.to_megatron(routes, lengths, packed=False, seq_length=4)
    assert flat.shape == (12, 2, 2)
    # Token s of row b sits at s * 3 + b.
    assert torch.equal(flat[2 * 3 + 0], routes[0, 2])
    assert torch.equal(flat[1 * 3 + 2], routes[2, 1])
    assert (flat[1 * 3 + 1] == UNKNOWN).all()          # row 1 has one token
    back = route_replay.from_megatron(flat, lengths, packed=False, width=4)
    assert torch.equal(back, routes)


def test_a_packed_row_holds_the_samples_back_to_back_and_splits_over_sp_ranks():
    lengths = torch.tensor([3, 1, 2])
    routes = _routes(lengths.tolist(), 5)
    whole = route_replay.to_megatron(routes, lengths, packed=True, seq_length=8)
    assert torch.equal(whole[3], routes[1, 0]) and torch.equal(whole[5], routes[2, 1])
    assert (whole[6:] == UNKNOWN).all()                 # the tail to a multiple of TP
    parts = [route_replay.to_megatron(routes, lengths, True, 8, r, 2) for r in range(2)]
    assert torch.equal(torch.cat(parts), whole) and parts[1].shape == (4, 2, 2)
    assert torch.equal(route_replay.from_megatron(whole, lengths, True, 5), routes)


def test_bad_routes_are_refused_naming_the_sample():
    lengths = torch.tensor([3, 2])
    good = _routes(lengths.tolist(), 4)
    route_replay.check_routes(good, lengths, 2, 2, 8, "rollout_routes")
    unknown = good.clone()
    unknown[1, 1] = UNKNOWN                             # the engine's last token: allowed
    route_replay.check_routes(unknown, lengths, 2, 2, 8, "rollout_routes")
    with pytest.raises(ValueError, match="3 MoE layers"):
        route_replay.check_routes(good, lengths, 3, 2, 8, "rollout_routes")
    with pytest.raises(ValueError, match="up to 3 tokens"):
        route_replay.check_routes(good[:, :2], lengths, 2, 2, 8, "rollout_routes")
    dup = good.clone()
    dup[1, 0, 1] = torch.tensor([5, 5])
    with pytest.raises(ValueError, match="sample 1 routes a token to the same expert twice"):
        route_replay.check_routes(dup, lengths, 2, 2, 8, "rollout_routes")
    out = good.clone()
    out[0, 2, 0, 1] = 8
    with pytest.raises(ValueError, match=r"sample 0 has expert ids outside \[0, 8\)"):
        route_replay.check_routes(out, lengths, 2, 2, 8, "rollout_routes")


def test_agreement_counts_token_layers_with_equal_sets():
    lengths = torch.tensor([2, 2])
    a = _routes(lengths.tolist(), 2, layers=1)
    b = a.flip(-1).clone()                              # same sets, other order: agree
    assert route_replay.route_agreement(a, b, lengths) == 1.0
    b[0, 0, 0] = torch.tensor([9, 10])                  # one of four (token, layer) differs
    assert route_replay.route_agreement(a, b, lengths) == 0.75
    b[1, 1] = UNKNOWN                                   # not compared
    assert route_replay.route_agreement(a, b, lengths) == pytest.approx(2 / 3)
