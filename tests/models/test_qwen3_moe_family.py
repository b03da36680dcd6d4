"""Qwen3-MoE's model half: its HF config both ways (expert count, top-k, expert width,
norm_topk_prob, dense layers, decoder_sparse_step read exactly), what a spec cannot express
refused naming the key, the parameter counts against transformers' model and a tiny folder
that transformers loads with every tensor, the router included, initialised."""

import dataclasses

import pytest
import torch
import transformers

from mindrl.config.model_spec import load_model_spec
from mindrl.models.families import model_family
from mindrl.models.hf_config import hf_config_from_spec, spec_from_hf_config


@pytest.mark.parametrize("name, divisible", [("tiny-qwen3-moe", 1), ("qwen3-30b-a3b", 128),
                                             ("qwen3-235b-a22b", 128)])
def test_spec_to_hf_to_spec_is_the_identity(name, divisible):
    spec = load_model_spec(name)
    config = hf_config_from_spec(spec)
    assert isinstance(config, transformers.Qwen3MoeConfig)
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (
        spec.moe.num_experts, spec.moe.router_topk, spec.moe.ffn_hidden_size)
    assert config.decoder_sparse_step == 1 and config.output_router_logits is False
    assert config.mlp_only_layers == [] and config.norm_topk_prob is True
    assert spec_from_hf_config(config.to_dict(), name, divisible) == spec


def test_published_30b_a3b_counts():
    # Qwen/Qwen3-30B-A3B model card: 30.5B parameters, 3.3B activated.
    spec = load_model_spec("qwen3-30b-a3b")
    assert round(spec.num_parameters() / 1e9, 1) == 30.5
    assert round(spec.num_parameters(active=True) / 1e9, 1) == 3.4   # 3.35B, card rounds down


def test_decoder_sparse_step_and_mlp_only_layers_map_exactly_into_dense_layers():
    spec = dataclasses.replace(load_model_spec("tiny-qwen3-moe"), num_layers=6)
    values = hf_config_from_spec(spec).to_dict()
    values.update(decoder_sparse_step=2, mlp_only_layers=[3])
    back = spec_from_hf_config(values, "stepped")
    # HF: sparse when (i + 1) % step == 0 and i not in mlp_only_layers -> layers 1, 5 sparse.
    assert back.moe.dense_layers == (0, 2, 3, 4)
    config = hf_config_from_spec(back)
    assert config.decoder_sparse_step == 1 and config.mlp_only_layers == [0, 2, 3, 4]
    hf = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**values))
    sparse = [i for i, layer in enumerate(hf.model.layers)
              if isinstance(layer.mlp, transformers.models.qwen3_moe.modeling_qwen3_moe
                            .Qwen3MoeSparseMoeBlock)]
    assert sparse == [1, 5]
    assert back.num_parameters() == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("key, value, match", [
    ("use_sliding_window", True, "use_sliding_window"),
    ("shared_expert_intermediate_size", 64, "shared_expert_intermediate_size=64"),
    ("num_experts", 0, "num_experts=0"),
    ("attention_bias", True, "attention_bias"),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}, "rope_type"),
])
def test_what_a_spec_cannot_express_is_refused_naming_the_key(key, value, match):
    values = hf_config_from_spec(load_model_spec("tiny-qwen3-moe")).to_dict()
    values.pop("num_local_experts")     # to_dict's spelling of num_experts
    values[key] = value
    with pytest.raises(ValueError, match=match):
        spec_from_hf_config(values, "bad")


def test_counts_equal_transformers_model():
    spec = load_model_spec("tiny-qwen3-moe")
    hf = transformers.Qwen3MoeForCausalLM(hf_config_from_spec(spec))
    total = sum(p.numel() for p in hf.parameters())     # tied: lm_head is the embedding
    assert spec.num_parameters() == total == 609_152
    # Active by hand: each token passes through top-2 of the 8 experts of every MoE layer.
    experts = sum(p.numel() for n, p in hf.named_parameters() if ".mlp.experts." in n)
    assert experts == 2 * 8 * 3 * 128 * 64
    active = total - experts + experts * 2 // 8
    assert spec.num_parameters(active=True) == active == 314_240
    with_dense = dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, dense_layers=(1,)))
    hf = transformers.Qwen3MoeForCausalLM(hf_config_from_spec(with_dense))
    assert isinstance(hf.model.layers[1].mlp,
                      transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeMLP)
    assert with_dense.num_parameters() == sum(p.numel() for p in hf.parameters())
    # One MoE layer (router + 2 of 8 experts) and one dense MLP of ffn_hidden_size 256.
    assert with_dense.num_parameters(active=True) == (
        with_dense.num_parameters() - 6 * 3 * 128 * 64)


def test_tiny_folder_loads_in_transformers_with_every_tensor_initialised(tmp_path):
    from mindrl.models.tiny import make_tiny_model

    out = make_tiny_model("tiny-qwen3-moe", "char", tmp_path / "m")
    hf = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert isinstance(hf, transformers.Qwen3MoeForCausalLM)
    assert hf.config.num_experts == 8 and hf.config.num_experts_per_tok == 2
    for name, p in hf.named_parameters():
        centre = 1.0 if "norm" in name else 0.0
        assert 0.01 < float((p.detach() - centre).std()) < 0.03, name
    with torch.no_grad():
        logits = hf(torch.arange(1, 9)[None]).logits
    assert logits.shape == (1, 8, 128) and torch.isfinite(logits).all()


def test_family_declares_experts_and_qwen3_attention():
    family = model_family("qwen3_moe")
    assert family.features.experts and family.features.qk_norm
    assert not family.features.qkv_bias
    assert not model_family("qwen3").features.experts


def test_megatron_config_routes_as_transformers_does():
    from mindrl.config.roles import Parallelism
    from mindrl.models.builder import transformer_config

    spec = load_model_spec("tiny-qwen3-moe")
    config = transformer_config(spec, Parallelism())
    assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == (
        8, 2, 64)
    assert config.ffn_hidden_size == 256 and config.qk_layernorm
    # norm_topk_prob: softmax over the top-k logits == HF's softmax -> top-k -> renormalise.
    assert config.moe_router_pre_softmax is False and config.moe_aux_loss_coeff == 0.0
    assert config.moe_layer_freq == [1, 1] and config.moe_token_dispatcher_type == "allgather"
    assert config.moe_grouped_gemm is None    # the device kind's, chosen with the layer spec
    unnormalised = dataclasses.replace(spec, moe=dataclasses.replace(
        spec.moe, norm_topk_prob=False, dense_layers=(0,)))
    config = transformer_config(unnormalised, Parallelism())
    assert config.moe_router_pre_softmax is True and config.moe_layer_freq == [0, 1]


def test_moe_router_runs_without_transformer_engine():
    from mindrl import device

    device.prepare_megatron()
    from megatron.core.transformer.moe import moe_utils

    x, w = torch.randn(5, 16, requires_grad=True), torch.randn(4, 16, requires_grad=True)
    out = moe_utils.router_gating_linear(x, w, None, torch.float32)
    out.sum().backward()
    assert torch.allclose(out, x @ w.T, atol=1e-6)
    assert torch.allclose(w.grad, x.detach().sum(0).expand(4, 16), atol=1e-5)
