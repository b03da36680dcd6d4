"""The `moe:` block of a model yaml: bad expert counts, top-k and dense layers refused naming
the key; a block on a dense architecture (or none on a MoE one) refused."""

import dataclasses

import pytest

from mindrl.config.model_spec import ModelSpec, MoESpec, load_model_spec


def _with(**moe):
    spec = load_model_spec("tiny-qwen3-moe")
    return dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, **moe))


def test_top_k_above_the_expert_count_is_refused():
    with pytest.raises(ValueError, match=r"moe.router_topk=9 must be in \[1, moe.num_experts=8\]"):
        _with(router_topk=9)
    with pytest.raises(ValueError, match="moe.router_topk=0"):
        _with(router_topk=0)


def test_dense_layers_out_of_range_are_refused():
    with pytest.raises(ValueError, match=r"moe.dense_layers \[2\] are not layers of a model "
                                         r"with num_layers=2"):
        _with(dense_layers=(0, 2))
    assert _with(dense_layers=(1,)).moe.is_moe_layer(0)
    assert not _with(dense_layers=(1,)).moe.is_moe_layer(1)


def test_moe_block_only_on_a_moe_architecture():
    dense = load_model_spec("tiny-qwen3")
    with pytest.raises(ValueError, match="architecture 'qwen3' takes no `moe:` block"):
        dataclasses.replace(dense, moe=MoESpec(num_experts=4, router_topk=2,
                                               ffn_hidden_size=32))
    with pytest.raises(ValueError, match="architecture 'qwen3_moe' needs `moe:` block"):
        dataclasses.replace(load_model_spec("tiny-qwen3-moe"), moe=None)


def test_an_unknown_moe_key_names_the_nearest(tmp_path):
    values = load_model_spec("tiny-qwen3-moe").to_dict()
    values["moe"] = dict(values["moe"], num_expert=8)
    del values["moe"]["num_experts"]
    with pytest.raises(ValueError, match="unknown moe key 'num_expert'; did you mean "
                                         "'num_experts'"):
        ModelSpec.from_dict(values, "x.yaml")
    values["moe"]["num_experts"] = values["moe"].pop("num_expert")
    values["moe"]["dense_layers"] = [1]
    assert ModelSpec.from_dict(values, "x.yaml").moe.dense_layers == (1,)
