"""One family registration (config/names.py FAMILIES): every family list config reads is
derived from it, each tiny model is of its entry's kind, and `+scale_down` refuses a family
without one, naming those that have one, instead of running another family's miniature.
tests/ckpt/test_registry.py holds the table equal to the registry's families."""

import ast
from pathlib import Path

import pytest

from mindrl.config import ConfigError, load_recipe, names
from mindrl.config.model_spec import load_model_spec

DERIVED = ("ARCHITECTURES", "VISION_FAMILIES", "QK_NORM_ARCHITECTURES", "MOE_ARCHITECTURES",
           "TINY_MODELS")
MINDRL = Path(__file__).resolve().parents[2] / "mindrl"


def test_every_family_list_is_derived_from_the_one_table():
    table = names.FAMILIES
    assert len({f.model_type for f in table}) == len(table)
    assert names.ARCHITECTURES == tuple(f.model_type for f in table if not f.vision)
    assert names.VISION_FAMILIES == tuple(f.model_type for f in table if f.vision)
    assert names.QK_NORM_ARCHITECTURES == tuple(f.model_type for f in table if f.qk_norm)
    assert names.MOE_ARCHITECTURES == tuple(f.model_type for f in table if f.experts)
    assert names.TINY_MODELS == {f.model_type: f.tiny_model for f in table}


def test_no_other_module_keeps_a_family_list():
    defined = []
    for path in sorted(MINDRL.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            defined += [(t.id, path.relative_to(MINDRL).as_posix()) for t in targets
                        if isinstance(t, ast.Name) and t.id in DERIVED]
    assert sorted(defined) == sorted((name, "config/names.py") for name in DERIVED)


@pytest.mark.parametrize("entry", names.FAMILIES, ids=lambda f: f.model_type)
def test_each_tiny_model_is_of_its_entrys_kind(entry):
    spec = load_model_spec(entry.tiny_model)
    if entry.vision:
        assert spec.vision is not None and spec.vision.family == entry.model_type
    else:
        assert spec.vision is None
        assert (spec.moe is not None) == entry.experts
        assert (spec.architecture in names.QK_NORM_ARCHITECTURES) == entry.qk_norm


def test_scale_down_refuses_an_unknown_architecture_naming_the_families(cpu2):
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_qwen25_7b", ["model.architecture=gpt2", "+scale_down=2"],
                    cluster=cpu2)
    assert e.value.keys == ["model.architecture"]
    text = str(e.value)
    assert "model.architecture='gpt2'" in text
    assert "use one of qwen2, llama, qwen3, qwen3_moe" in text


def test_scale_down_refuses_an_unknown_vision_family_and_keeps_the_vl_one(cpu2):
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_qwen25vl_7b_geo3k", ["model.vision.family=llava", "+scale_down=4"],
                    cluster=cpu2)
    assert e.value.keys == ["model.vision.family"]
    assert "model.vision.family='llava'" in str(e.value) and "use one of qwen2_5_vl" in str(e.value)
    mini = load_recipe("grpo_qwen25vl_7b_geo3k", ["+scale_down=4"], cluster=cpu2)
    assert mini.model.name == mini.prepare.tiny_model == "tiny-qwen25vl"
    assert mini.prepare.task == "vl"
