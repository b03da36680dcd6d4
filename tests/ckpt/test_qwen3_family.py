"""Qwen3 dense as a registered family: its HF config both ways with what a spec cannot express
refused, its tensor table equal to transformers' state dict (q/k norms [head_dim]), its
parameter count, and HF -> Megatron (TP2 x PP2) -> HF bit for bit."""

import json

import pytest
import torch
import transformers

from mindrl.ckpt import mapping, registry
from mindrl.config import names
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.models.builder import transformer_config
from mindrl.models.families import model_family
from mindrl.models.hf_config import hf_config_from_spec, spec_from_hf_config

from support.ckpt_convert_worker import run_conversions
from support.ckpt_hf_models import read_hf_tensors, save_hf
from support.hf_reference import reference_hf_model
from support import run_env


def test_qk_norm_name_list_equals_the_registry():
    declared = tuple(t for t in registry.model_types() if model_family(t).features.qk_norm)
    assert names.QK_NORM_ARCHITECTURES == declared == ("qwen3", "qwen3_moe")
    assert not model_family("qwen3").features.qkv_bias


def test_tiny_qwen3_table_and_count_equal_transformers():
    spec = load_model_spec("tiny-qwen3")
    assert spec.head_dim == 64 != spec.hidden_size // spec.num_attention_heads
    hf = reference_hf_model(spec)
    assert isinstance(hf, transformers.Qwen3ForCausalLM)
    state = dict(hf.named_parameters())     # tied: lm_head is the embedding
    assert set(mapping.hf_tensor_names(spec)) == set(state)
    for rule, layer in mapping.iter_rules(spec):
        for name, shape in zip(rule.hf_names(layer), mapping.expected_hf_shapes(rule, spec)):
            assert tuple(state[name].shape) == shape, name
    assert state["model.layers.1.self_attn.k_norm.weight"].shape == (64,)
    assert spec.num_parameters() == sum(p.numel() for p in hf.parameters())


def test_shipped_sizes_match_the_published_counts():
    # Parameter counts from the Qwen3 model cards (billions, rounded there to 0.1).
    published = {"qwen3-0.6b": 0.6, "qwen3-1.7b": 1.7, "qwen3-4b": 4.0, "qwen3-8b": 8.2,
                 "qwen3-14b": 14.8, "qwen3-32b": 32.8}
    for name, billions in published.items():
        spec = load_model_spec(name)
        assert spec.head_dim == 128 and spec.vocab_size == 151936 and not spec.add_qkv_bias
        assert abs(spec.num_parameters() / 1e9 - billions) < 0.06, name
        config = hf_config_from_spec(spec)
        assert config.model_type == "qwen3" and config.head_dim == 128
        assert spec_from_hf_config(config.to_dict(), name, 128) == spec


def test_megatron_config_has_qk_layernorm():
    from mindrl.config.roles import Parallelism

    config = transformer_config(load_model_spec("tiny-qwen3"), Parallelism())
    assert config.qk_layernorm and config.kv_channels == 64 and not config.add_qkv_bias


def test_what_a_spec_cannot_express_is_refused():
    base = hf_config_from_spec(load_model_spec("tiny-qwen3")).to_dict()
    for extra, match in [({"attention_bias": True}, "attention_bias"),
                         ({"use_sliding_window": True, "sliding_window": 16}, "sliding-window"),
                         ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6,
                                               "factor": 4.0}}, "RoPE scaling")]:
        with pytest.raises(ValueError, match=match):
            spec_from_hf_config({**base, **extra}, "q3")
    import dataclasses
    with pytest.raises(ValueError, match="no qkv-only bias"):
        hf_config_from_spec(dataclasses.replace(load_model_spec("tiny-qwen3"), add_qkv_bias=True))


@pytest.mark.slow   # a spawned converter world (see tests/conftest.py)
def test_qwen3_round_trips_bit_for_bit(tmp_path):
    spec = load_model_spec("tiny-qwen3")
    hf, mg, back = tmp_path / "hf", tmp_path / "mg", tmp_path / "back"
    save_hf(reference_hf_model(spec, seed=3), hf)
    spawn_local(run_conversions, 1, [
        ("hf2mg", dict(load_dir=hf, save_dir=mg, tp=2, pp=2, model_type_hf="qwen3",
                       add_qkv_bias=False)),
        ("mg2hf", dict(load_dir=mg, save_dir=back))])
    assert json.loads((back / "config.json").read_text())["model_type"] == "qwen3"
    original, converted = read_hf_tensors(hf), read_hf_tensors(back)
    assert sorted(original) == sorted(converted) and len(original) == 2 + 2 * 11
    for name, tensor in original.items():
        assert converted[name].dtype == tensor.dtype and torch.equal(converted[name], tensor), name


@pytest.mark.slow   # two converter CLI runs
def test_qwen3_example_scripts_run_as_shipped(tmp_path):
    import subprocess
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[2] / "examples" / "ckpt"
    env = dict(run_env.for_a_run(), PYTHON=run_env.python())
    for name in ("ckpt_convert_qwen3_hf2mcore.sh", "ckpt_convert_qwen3_mcore2hf.sh"):
        done = subprocess.run(["bash", str(scripts / name)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    mcore = tmp_path / "model_weights" / "tiny_qwen3_mcore" / "release"
    info = json.loads((mcore / "mindrl_model.json").read_text())
    assert info["params_dtype"] == "bf16" and info["spec"]["architecture"] == "qwen3"
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2}]
    original = read_hf_tensors(tmp_path / "model_from_hf" / "tiny_qwen3_hf")
    back = read_hf_tensors(tmp_path / "model_from_hf" / "tiny_qwen3_hf_from_mcore")
    assert sorted(original) == sorted(back) and "model.layers.1.self_attn.q_norm.weight" in back
    assert all(torch.equal(back[k], v.to(torch.bfloat16)) for k, v in original.items())
