"""A new family from a temporary registration: a renamed copy of llama ("toyllama") converts
HF -> Megatron (TP2 x PP2) -> HF bit for bit, with no edit of mindrl's tables; after it is
removed, nothing knows it."""

import json

import pytest
import torch

from mindrl.ckpt import mapping, registry
from mindrl.config import names
from mindrl.distributed import spawn_local
from mindrl.models.families import model_types
from mindrl.models.hf_config import hf_config_from_spec, spec_from_hf_config

from support import toy_family
from support.ckpt_hf_models import read_hf_tensors, save_hf


@pytest.fixture
def toy():
    architectures = toy_family.register()
    try:
        yield toy_family
    finally:
        toy_family.unregister(architectures)


def test_registered_toy_family_is_known_everywhere(toy):
    model = toy.tiny_model()
    spec = spec_from_hf_config(model.config.to_dict(), "toy")
    assert spec.architecture == "toyllama" and spec.family == "toyllama"
    assert hf_config_from_spec(spec).model_type == "toyllama"
    assert [r.mcore for r in mapping.layer_rules(spec)] == \
        [r.mcore for r in registry.mapping_of("llama").layer_rules(spec)]
    assert set(mapping.hf_tensor_names(spec)) == set(model.state_dict())
    assert registry.model_type_hf()["toyllama"] == ("toyllama",)
    assert "toyllama" in model_types() and "toyllama" in registry.model_types()


def test_unregistered_toy_family_is_refused(toy):
    spec = spec_from_hf_config(toy.tiny_model().config.to_dict(), "toy")
    toy.unregister(names.ARCHITECTURES[:-1])
    with pytest.raises(ValueError, match="model_type 'toyllama' is not supported"):
        spec_from_hf_config(toy.tiny_model().config.to_dict(), "toy")
    with pytest.raises(ValueError, match="no tensor table for model_type 'toyllama'"):
        mapping.layer_rules(spec)
    toy.register()     # the fixture removes it again


@pytest.mark.slow   # a spawned converter world (see tests/conftest.py)
def test_toy_family_round_trips_bit_for_bit(toy, tmp_path):
    hf, mg, back = tmp_path / "hf", tmp_path / "mg", tmp_path / "back"
    save_hf(toy.tiny_model(seed=3), hf)
    assert json.loads((hf / "config.json").read_text())["model_type"] == "toyllama"
    spawn_local(toy.run_conversions, 1, [
        ("hf2mg", dict(load_dir=hf, save_dir=mg, tp=2, pp=2)),
        ("mg2hf", dict(load_dir=mg, save_dir=back))])
    assert json.loads((back / "config.json").read_text())["model_type"] == "toyllama"
    original, converted = read_hf_tensors(hf), read_hf_tensors(back)
    assert sorted(original) == sorted(converted) and len(original) == 2 + 2 * 9 + 1
    for name, tensor in original.items():
        assert converted[name].dtype == tensor.dtype and torch.equal(converted[name], tensor), name
