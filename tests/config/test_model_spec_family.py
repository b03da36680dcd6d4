"""A spec names its registered family; the expert-parallel seam refuses sizes above 1 until
a family has experts; config's family name lists gate what a spec may name."""

import pytest

from mindrl.config import names
from mindrl.config.model_spec import load_model_spec
from mindrl.config.roles import Parallelism


def test_a_spec_names_its_family():
    assert load_model_spec("tiny-qwen2").family == "qwen2"
    assert load_model_spec("tiny-llama").family == "llama"
    vl = load_model_spec("tiny-qwen25vl")
    assert vl.architecture == "qwen2" and vl.family == "qwen2_5_vl"


def test_expert_parallel_size_is_accepted_above_one():
    assert Parallelism().expert_model_parallel_size == 1
    assert Parallelism(expert_model_parallel_size=1).tensor_model_parallel_size == 1
    assert Parallelism(expert_model_parallel_size=2).expert_model_parallel_size == 2
    with pytest.raises(ValueError, match="expert_model_parallel_size=0 must be >= 1"):
        Parallelism(expert_model_parallel_size=0)


def test_architecture_must_be_a_registered_name(monkeypatch):
    import dataclasses

    spec = load_model_spec("tiny-llama")
    with pytest.raises(ValueError, match="architecture='toyllama' is not supported"):
        dataclasses.replace(spec, architecture="toyllama")
    monkeypatch.setattr(names, "ARCHITECTURES", names.ARCHITECTURES + ("toyllama",))
    assert dataclasses.replace(spec, architecture="toyllama").family == "toyllama"
