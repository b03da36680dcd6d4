"""Qwen3-MoE's tensor table without Megatron: per-layer tables (a dense layer keeps its MLP, a
MoE layer gets router and experts), names and shapes equal to transformers' save_pretrained,
the stacked spelling (a loaded model's state dict) read as the same per-expert tensors from
safetensors and torch files, one fused group per layer's experts, and the converter's
refusals of a folder that is not the model yaml or does not split over TP / EP."""

import json

import pytest
import torch
from safetensors.torch import load_file

from mindrl.ckpt import hf_io, mapping, registry
from mindrl.ckpt.convert_checks import MODEL_TYPE_HF, ConversionError
from mindrl.ckpt.converter import plan_hf_to_mcore
from mindrl.config.model_spec import load_model_spec
from mindrl.weight_sync.plan import fused_module

from support.hf_reference import reference_hf_model
from support.moe_hf import moe_spec, save_stacked


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(spec, model, per-expert folder, stacked folder) for tiny-qwen3-moe with layer 1 dense."""
    root = tmp_path_factory.mktemp("moe")
    spec = moe_spec(dense_layers=(1,))
    model = reference_hf_model(spec, seed=5)
    model.save_pretrained(root / "per_expert")
    save_stacked(model, root / "stacked")
    return spec, model, root / "per_expert", root / "stacked"


def test_layers_hold_their_own_rules():
    spec = moe_spec(dense_layers=(1,))
    moe = [r.mcore_name(0) for r in mapping.layer_rules(spec, 0)]
    dense = [r.mcore_name(1) for r in mapping.layer_rules(spec, 1)]
    assert "decoder.layers.0.mlp.router.weight" in moe
    assert sum(".local_experts." in n for n in moe) == 2 * 8
    assert not any("linear_fc" in n and "experts" not in n for n in moe)
    assert dense[-2:] == ["decoder.layers.1.mlp.linear_fc1.weight",
                          "decoder.layers.1.mlp.linear_fc2.weight"]
    assert not any("router" in n or "experts" in n for n in dense)
    assert len(mapping.layer_rules(spec)) == len(moe) + 2     # every rule any layer may hold
    # Without dense layers the table holds no dense MLP rule at all.
    assert not any(r.mcore.endswith("mlp.linear_fc1.weight")
                   for r in mapping.layer_rules(load_model_spec("tiny-qwen3-moe")))


def test_dense_families_have_one_table_for_every_layer():
    for name in ("tiny-qwen2", "tiny-qwen3"):
        spec = load_model_spec(name)
        assert all(mapping.layer_rules(spec, layer) == mapping.layer_rules(spec)
                   for layer in range(spec.num_layers))


def test_table_equals_save_pretrained(saved):
    spec, _, per_expert, _ = saved
    stored = load_file(per_expert / "model.safetensors")
    assert set(mapping.hf_tensor_names(spec)) == set(stored)
    for rule, layer in mapping.iter_rules(spec):
        for name, shape in zip(rule.hf_names(layer), mapping.expected_hf_shapes(rule, spec)):
            assert tuple(stored[name].shape) == shape, name
    assert stored["model.layers.0.mlp.gate.weight"].shape == (8, 128)
    assert stored["model.layers.0.mlp.experts.7.down_proj.weight"].shape == (128, 64)
    assert stored["model.layers.1.mlp.gate_proj.weight"].shape == (256, 128)
    assert spec.num_parameters() == sum(t.numel() for t in stored.values())


def test_stacked_state_dict_reads_as_the_saved_experts(saved):
    spec, model, per_expert, _ = saved
    stored = load_file(per_expert / "model.safetensors")
    unstacked = mapping.unstack_hf(model.state_dict(), spec)
    assert "model.layers.0.mlp.experts.gate_up_proj" not in unstacked
    for name, tensor in stored.items():
        assert torch.equal(unstacked[name], tensor), name
    # full_mcore_from_hf takes either spelling and gives the same Megatron tensors.
    a = mapping.full_mcore_from_hf(stored, spec)
    b = mapping.full_mcore_from_hf(dict(model.state_dict()), spec)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fc1 = a["decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight"]
    assert torch.equal(fc1, model.model.layers[0].mlp.experts.gate_up_proj[3])


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_weights_read_stacked_experts_by_range(saved, tmp_path, fmt):
    spec, model, per_expert, _ = saved
    folder = save_stacked(model, tmp_path / fmt, fmt)
    stored = load_file(per_expert / "model.safetensors")
    with hf_io.HFWeights.open(folder, split=mapping.hf_split(spec)) as weights:
        assert set(weights.names()) == set(stored)
        name = "model.layers.0.mlp.experts.5.up_proj.weight"
        assert weights.shape(name) == (64, 128)
        assert torch.equal(weights.get(name), stored[name])
        strided = torch.empty(128, 64).t()               # read_into a non-contiguous view
        weights.read_into(name, strided)
        assert torch.equal(strided, stored[name])
        where = weights.file_bytes(name)
        if fmt == "bin":
            assert where is None                          # a pickle's bytes: through torch
        else:                                             # a byte range of the stacked tensor
            whole = weights.file_bytes("model.layers.0.mlp.experts.0.gate_proj.weight")
            assert where.nbytes == 64 * 128 * 4
            assert where.offset - whole.offset == (5 * 2 + 1) * 64 * 128 * 4


def test_stacked_experts_convert_as_a_byte_copy(saved):
    """Streaming: an expert's linear_fc1 is two byte ranges of the stacked file, copied from
    file to file (copy_plan), never the whole stack read into memory."""
    from mindrl.ckpt import copy_plan

    spec, _, _, stacked = saved
    rule = next(r for r in mapping.layer_rules(spec, 0)
                if r.mcore.endswith("local_experts.2.linear_fc1.weight"))
    with hf_io.HFWeights.open(stacked, split=mapping.hf_split(spec)) as weights:
        pieces = copy_plan.mcore_pieces(rule, 0, spec, (128, 128), torch.float32, weights)
        gate = weights.file_bytes("model.layers.0.mlp.experts.2.gate_proj.weight")
    assert pieces is not None and [p.nbytes for p in pieces] == [64 * 128 * 4] * 2
    assert pieces[0].offset == gate.offset and pieces[1].offset == gate.offset + 64 * 128 * 4


def test_stacked_tensor_that_does_not_split_is_refused(tmp_path):
    from safetensors.torch import save_file

    spec = load_model_spec("tiny-qwen3-moe")
    tmp_path.mkdir(exist_ok=True)
    save_file({"model.layers.0.mlp.experts.gate_up_proj": torch.zeros(8, 127, 128)},
              tmp_path / "model.safetensors")
    with pytest.raises(hf_io.HFCheckpointError, match=r"gate_up_proj.*\(8, 127, 128\)"):
        hf_io.HFWeights.open(tmp_path, split=mapping.hf_split(spec))


def test_each_layers_experts_are_one_fused_group():
    spec = moe_spec(dense_layers=(1,))
    groups = {fused_module(r, 0) for r in mapping.layer_rules(spec, 0) if "experts" in r.mcore}
    assert groups == {"decoder.layers.0.mlp.experts"}
    assert fused_module(next(r for r in mapping.layer_rules(spec, 0) if "router" in r.mcore),
                        0) == "decoder.layers.0.mlp.router"


def test_model_type_hf_names():
    assert MODEL_TYPE_HF["qwen3-moe"] == MODEL_TYPE_HF["qwen3_moe"] == ("qwen3_moe",)
    assert registry.mapping_of("qwen3_moe").model_type_hf[0] == "qwen3-moe"   # MindSpeed's


def _config_only(tmp_path, **changes):
    """A folder holding only config.json: the checks below refuse before reading weights."""
    config = reference_hf_model(load_model_spec("tiny-qwen3-moe")).config.to_dict()
    config["num_experts"] = config.pop("num_local_experts")   # the published configs' key
    config.update(changes)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("key, value, named", [
    ("num_experts", 4, r"moe.num_experts \(num_experts\): 4 here, 8 in the yaml"),
    ("num_experts_per_tok", 1, r"moe.router_topk \(num_experts_per_tok\): 1 here, 2 in"),
    ("moe_intermediate_size", 32,
     r"moe.ffn_hidden_size \(moe_intermediate_size\): 32 here, 64 in")])
def test_a_folder_that_is_not_the_model_yaml_is_refused(tmp_path, key, value, named):
    folder = _config_only(tmp_path / "hf", **{key: value})
    with pytest.raises(ConversionError, match=named) as e:
        plan_hf_to_mcore(folder, tmp_path / "out", model="tiny-qwen3-moe")
    assert "tiny-qwen3-moe.yaml" in str(e.value) and "pass the --model" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_expert_and_tensor_parallel_sizes_are_checked(tmp_path):
    folder = _config_only(tmp_path / "hf")
    with pytest.raises(ConversionError, match=r"expert-parallel-size 3 does not divide "
                                              r"moe.num_experts \(num_experts\)=8"):
        plan_hf_to_mcore(folder, tmp_path / "out", ep=3)
    odd = _config_only(tmp_path / "odd", moe_intermediate_size=65)
    with pytest.raises(ConversionError, match=r"tensor-parallel-size 2 does not divide "
                                              r"moe.ffn_hidden_size \(moe_intermediate_size\)=65"):
        plan_hf_to_mcore(odd, tmp_path / "out", tp=2)
