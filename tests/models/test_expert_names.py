"""Expert parameter names at expert parallelism: local <-> global numbers (EP ranks hold
consecutive blocks of experts, as Megatron's SequentialMLP numbers them)."""

import pytest

from mindrl.models.expert_names import expert_number, global_name, holder, renumbered

FC1 = "decoder.layers.1.mlp.experts.local_experts.{}.linear_fc1.weight"


def test_local_experts_map_to_consecutive_global_blocks():
    assert global_name(FC1.format(0), 0, 4) == FC1.format(0)
    assert global_name(FC1.format(3), 1, 4) == FC1.format(7)
    assert global_name(FC1.format(1), 3, 2) == FC1.format(7)
    assert global_name("decoder.layers.1.mlp.router.weight", 1, 4) == (
        "decoder.layers.1.mlp.router.weight")
    assert expert_number(FC1.format(12)) == 12 and expert_number("decoder.final_layernorm") is None
    assert renumbered(FC1.format(12), 5) == FC1.format(5)


def test_holder_inverts_global_name():
    for ep in (1, 2, 4, 8):
        for g in range(8):
            rank, local = holder(g, 8, ep)
            assert global_name(FC1.format(local), rank, 8 // ep) == FC1.format(g)
    with pytest.raises(ValueError, match="does not divide 8 experts"):
        holder(0, 8, 3)
