"""The family registry: config's family table and name lists equal it, its two halves agree,
the converter's --model-type-hf table is read from it; and the rule seams a Mixture-of-Experts
family needs ({expert} names, declared shapes such as a per-head norm's, declared fused
groups)."""

import dataclasses

import pytest

from mindrl.ckpt import mapping, registry
from mindrl.ckpt.convert_checks import MODEL_TYPE_HF
from mindrl.ckpt.mapping.decoder import layer_rule
from mindrl.ckpt.mapping.rule import FUSE_GATE_UP, TensorRule, expand_experts, hf_shapes
from mindrl.config import names
from mindrl.config.model_spec import ModelSpec
from mindrl.models.families import model_family, model_types
from mindrl.weight_sync.plan import fused_module, plan_units

SPEC = ModelSpec(name="t", architecture="llama", num_layers=2, hidden_size=64,
                 ffn_hidden_size=96, num_attention_heads=4, num_query_groups=2, vocab_size=80,
                 untie_embeddings_and_output_weights=True, norm_epsilon=1e-6,
                 rotary_base=1e4, max_position_embeddings=32, add_qkv_bias=False,
                 kv_channels=24)      # head_dim 24, not hidden / heads = 16


def test_config_name_lists_equal_the_registry():
    decoders = tuple(t for t in registry.model_types() if not registry.family(t).multimodal)
    vision = tuple(t for t in registry.model_types() if registry.family(t).multimodal)
    assert names.ARCHITECTURES == decoders == ("qwen2", "llama", "qwen3", "qwen3_moe")
    assert names.VISION_FAMILIES == vision == ("qwen2_5_vl",)
    assert model_types() == registry.model_types()


def test_config_family_table_declares_the_registrys_families():
    """config/names.py FAMILIES, which every config family list is derived from: one entry per
    registered family, in its order, with the features config reads."""
    assert tuple(f.model_type for f in names.FAMILIES) == registry.model_types()
    for entry in names.FAMILIES:
        features = model_family(entry.model_type).features
        assert (entry.vision, entry.qk_norm, entry.experts) == \
            (features.multimodal, features.qk_norm, features.experts), entry.model_type


def test_each_family_halves_agree():
    for model_type in registry.model_types():
        family = registry.family(model_type)
        assert family.model.model_type == family.mapping.model_type == model_type
        assert family.model.features.multimodal == family.mapping.multimodal
        assert model_family(model_type) is family.model
        assert family.model.features.experts == (model_type == "qwen3_moe")   # the one MoE
        assert bool(family.mapping.stacked_hf) == family.model.features.experts
    assert model_family("qwen2").features.qkv_bias and not model_family("llama").features.qkv_bias
    assert model_family("qwen2_5_vl").features.mrope


def test_model_type_hf_table_is_the_families_declaration():
    assert list(MODEL_TYPE_HF) == ["qwen2", "llama2", "llama3", "llama", "qwen2_5_vl", "qwen3",
                                   "qwen3-moe", "qwen3_moe"]
    assert {k: set(v) for k, v in MODEL_TYPE_HF.items()} == {
        "qwen2": {"qwen2"}, "llama2": {"llama", "qwen2"}, "llama3": {"llama"},
        "llama": {"llama"}, "qwen2_5_vl": {"qwen2_5_vl"}, "qwen3": {"qwen3"},
        "qwen3-moe": {"qwen3_moe"}, "qwen3_moe": {"qwen3_moe"}}
    # trainer/prepare.py converts with the first name a family declares.
    assert [registry.mapping_of(t).model_type_hf[0] for t in ("qwen2", "llama", "qwen2_5_vl")] \
        == ["qwen2", "llama2", "qwen2_5_vl"]


def test_register_refuses_halves_of_two_families():
    with pytest.raises(ValueError, match="model 'llama', mapping 'qwen2'"):
        registry.register(model_family("llama"), registry.mapping_of("qwen2"))
    assert registry.mapping_of("qwen2").model_type == "qwen2"


def test_expert_rules_expand_like_layers():
    experts = layer_rule("mlp.experts.local_experts.{expert}.linear_fc1.weight",
                         ["mlp.experts.{expert}.gate_proj.weight",
                          "mlp.experts.{expert}.up_proj.weight"],
                         fuse=FUSE_GATE_UP, tp_dim=0, shapes=(("ffn", "hidden"),) * 2,
                         group="mlp.experts")
    norm = layer_rule("input_layernorm.weight", ["input_layernorm.weight"], shapes=(("hidden",),))
    rules = expand_experts([norm, experts], 3)
    assert rules[0] is norm and len(rules) == 4
    assert [r.mcore_name(5) for r in rules[1:]] == [
        f"decoder.layers.5.mlp.experts.local_experts.{e}.linear_fc1.weight" for e in range(3)]
    assert rules[3].hf_names(1) == ("model.layers.1.mlp.experts.2.gate_proj.weight",
                                    "model.layers.1.mlp.experts.2.up_proj.weight")
    # A layer's experts are one fused group: a bucket never splits them.
    assert {r.group_name(5) for r in rules[1:]} == {"decoder.layers.5.mlp.experts"}
    assert hf_shapes(rules[2], SPEC) == ((96, 64), (96, 64))
    with pytest.raises(ValueError, match="without experts"):
        expand_experts([experts], 0)


def test_a_family_with_experts_gets_them_in_every_layer():
    toy = dataclasses.replace(registry.mapping_of("llama"), num_experts=lambda spec: 2,
                              layer_rules=lambda spec: [layer_rule(
                                  "mlp.experts.{expert}.weight", ["mlp.experts.{expert}.w"],
                                  shapes=(("hidden",),))])
    previous = registry.replace_mapping(toy)
    try:
        assert [r.mcore_name(0) for r in mapping.layer_rules(SPEC)] == [
            "decoder.layers.0.mlp.experts.0.weight", "decoder.layers.0.mlp.experts.1.weight"]
        assert len([n for n in mapping.hf_tensor_names(SPEC) if "experts" in n]) == 2 * 2
    finally:
        registry.replace_mapping(previous)


def test_declared_shapes_resolve_against_the_spec():
    q_norm = layer_rule("self_attention.q_layernorm.weight", ["self_attn.q_norm.weight"],
                        shapes=(("head_dim",),))
    assert mapping.expected_hf_shapes(q_norm, SPEC) == ((24,),)     # per head, not hidden
    qkv = next(r for r in mapping.layer_rules(SPEC) if r.mcore.endswith("linear_qkv.weight"))
    assert mapping.expected_hf_shapes(qkv, SPEC) == ((96, 64), (48, 64), (48, 64))
    assert mapping.expected_hf_shapes(mapping.SCORE, SPEC) == ((1, 64),)
    assert mapping.expected_hf_shapes(mapping.OUTPUT, SPEC) == ((80, 64),)
    undeclared = TensorRule("decoder.layers.{layer}.self_attention.k_layernorm.weight",
                            ("model.layers.{layer}.self_attn.k_norm.weight",), per_layer=True)
    with pytest.raises(ValueError, match="declares no HF shapes"):
        mapping.expected_hf_shapes(undeclared, SPEC)


def test_fused_groups_are_declared_by_the_tables():
    qkv = next(r for r in mapping.layer_rules(SPEC) if r.mcore.endswith("linear_qkv.weight"))
    assert fused_module(qkv, 1) == "decoder.layers.1.self_attention.linear_qkv"
    vision = [r for r in registry.mapping_of("qwen2_5_vl").vision_rules(
        dataclasses.replace(_vision(), depth=1)) if ".mlp." in r.mcore and "blocks" in r.mcore]
    assert {fused_module(r, None) for r in vision} == {"visual.blocks.0.mlp"}
    units = plan_units(SPEC, pp_size=2)
    assert [u.module for u in units][:2] == ["embedding.word_embeddings",
                                             "decoder.layers.0.input_layernorm"]


def _vision():
    from mindrl.config.model_spec import VisionSpec

    return VisionSpec(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                      out_hidden_size=64, fullatt_block_indexes=(1,))
