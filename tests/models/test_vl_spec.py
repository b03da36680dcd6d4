"""The model spec's optional vision part: the shipped Qwen2.5-VL shapes (3B/7B/32B and the
tiny CPU one) give transformers' own model exactly (parameter count), text models carry no
vision, and a VL shape that cannot be built is refused naming the key."""

import dataclasses

import pytest
import torch

from mindrl.models.hf_config import hf_config_from_spec
from mindrl.config.model_spec import ModelSpec, VisionSpec, load_model_spec

TOKEN_IDS = dict(image_token_id=151, video_token_id=152, vision_start_token_id=153,
                 vision_end_token_id=154)
# Published totals of the HF checkpoints (Qwen2.5-VL-*-Instruct model cards: 3.75B, 8.29B,
# 33.5B), to the nearest 10M.
PUBLISHED = {"qwen25vl-3b": 3.75e9, "qwen25vl-7b": 8.29e9, "qwen25vl-32b": 33.45e9}


@pytest.mark.parametrize("name", ["tiny-qwen25vl", "qwen25vl-3b", "qwen25vl-7b", "qwen25vl-32b"])
def test_vl_shapes_build_transformers_model_of_the_same_size(name):
    from transformers import Qwen2_5_VLForConditionalGeneration

    spec = load_model_spec(name)
    assert spec.is_multimodal and spec.architecture == "qwen2"
    config = hf_config_from_spec(spec, vision_token_ids=TOKEN_IDS)
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(config)
    assert sum(p.numel() for p in model.parameters()) == spec.num_parameters()
    visual = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    assert visual == spec.vision.num_parameters()
    assert config.text_config.rope_parameters["mrope_section"] == list(spec.mrope_section)
    if name in PUBLISHED:
        assert abs(spec.num_parameters() - PUBLISHED[name]) < 1e7


def test_text_models_have_no_vision_part():
    spec = load_model_spec("qwen25-7b")
    assert spec.vision is None and spec.mrope_section is None and not spec.is_multimodal


def _tiny(**changes):
    spec = load_model_spec("tiny-qwen25vl")
    values = {f.name: getattr(spec, f.name) for f in dataclasses.fields(ModelSpec)}
    vision = {f.name: getattr(spec.vision, f.name) for f in dataclasses.fields(VisionSpec)}
    vision.update(changes.pop("vision", {}))
    values.update(changes, vision=vision)
    return ModelSpec.from_dict(values, source="tiny-qwen25vl.yaml")


@pytest.mark.parametrize("changes, message", [
    (dict(mrope_section=(8, 12, 8)), "mrope_section [8, 12, 8] must sum to head_dim / 2 = 32"),
    (dict(mrope_section=None), "a VL model sets both vision and mrope_section"),
    (dict(vision={"num_heads": 3}), "vision.num_heads=3 must divide vision.hidden_size=128"),
    (dict(vision={"out_hidden_size": 128}), "vision.out_hidden_size=128 must equal hidden_size"),
    (dict(vision={"fullatt_block_indexes": [1, 4]}), "vision.fullatt_block_indexes [4]"),
    (dict(vision={"family": "llava"}), "vision.family='llava' is not supported"),
    (dict(vision={"patch": 14}), "tiny-qwen25vl.yaml: unknown vision key 'patch'; did you mean "
                                 "'patch_size'?"),
])
def test_a_vl_shape_that_cannot_be_built_is_refused_naming_the_key(changes, message):
    with pytest.raises(ValueError, match=".*" + message.replace("[", r"\[").replace(
            "]", r"\]").replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        _tiny(**changes)


def test_a_vl_config_needs_the_tokenizers_vision_ids():
    with pytest.raises(ValueError, match="needs the tokenizer's"):
        hf_config_from_spec(load_model_spec("tiny-qwen25vl"))


def test_a_vl_policy_is_accepted_and_a_vl_reward_model_refused_once():
    """The actor and reference may be VL models; a reward model scores text only, so a VL one
    is refused naming its key (once), while rule verifiers need no reward role."""
    from mindrl.config import ClusterResources, ConfigError, load_recipe

    run = load_recipe("grpo_tiny_cpu", ["model=tiny-qwen25vl"], cluster=ClusterResources("cpu", 2))
    assert run.models["actor"].vision is not None and run.models["ref"].vision is not None
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_cpu", ["model=tiny-qwen25vl", "+rl_config.reward_model=true",
                                      "+rl_config.reward_resource.num_cpus=1"],
                    cluster=ClusterResources("cpu", 3))
    text = str(e.value)
    assert "reward_config.model='tiny-qwen25vl': is a vision-language model" in text
    assert text.count("is a vision-language model") == 1


def test_the_spec_vision_part_drives_the_tables_and_the_weight_sync_plan():
    """mapping's vision table and the weight sync's units come from the spec alone: the
    tower's 54 tensors (depth 4), replicated, on the first pipeline stage."""
    from mindrl.ckpt import mapping
    from mindrl.weight_sync.plan import plan_units

    spec = load_model_spec("tiny-qwen25vl")
    vision = [rule for rule, _ in mapping.iter_rules(spec) if mapping.is_vision_tensor(rule.mcore)]
    assert len(vision) == 54 and all(rule.tp_dim is None for rule in vision)
    units = [u for u in plan_units(spec, pp_size=2) if mapping.is_vision_tensor(u.local_name)]
    assert len(units) == 54 and {u.stage for u in units} == {0}
    assert not [r for r, _ in mapping.iter_rules(load_model_spec("tiny-qwen2"))
                if mapping.is_vision_tensor(r.mcore)]


def test_freeze_vision_tower_on_a_text_model_is_refused_naming_the_key():
    from mindrl.config import ClusterResources, ConfigError, load_recipe

    with pytest.raises(ConfigError, match=r"actor_config.freeze_vision_tower=True: is set but "
                                          r"model tiny-qwen2 has no vision tower"):
        load_recipe("grpo_tiny_cpu", ["+actor_config.freeze_vision_tower=true"],
                    cluster=ClusterResources("cpu", 2))


def test_a_vl_role_without_a_converted_checkpoint_and_an_image_task_on_a_text_model_are_refused():
    """Only a converted checkpoint records the tower's HF config (vision token ids); an image
    task needs a tower to look at the images. Both refused before anything starts."""
    from mindrl.config import ClusterResources, ConfigError, load_recipe

    cpu = ClusterResources("cpu", 2)
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_vl_cpu", ["megatron_training.load=null"], cluster=cpu)
    assert "megatron_training.load=None: is not set, but model tiny-qwen25vl has a vision " \
           "tower" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_cpu", ["prepare.task=vl"], cluster=cpu)
    assert "prepare.task='vl': makes image prompts, but model tiny-qwen2" in str(e.value)
