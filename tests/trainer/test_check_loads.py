"""Before Ray starts (trainer/launch.check_loads): each role's `load` must hold the model its
recipe builds, read from the checkpoint's mindrl_model.json; a checkpoint of another model or
a folder that is no checkpoint is refused naming the key, both models and the fix. The
tensors are never read here (their layout is checked by every rank at load)."""

import dataclasses

import pytest

from mindrl.ckpt.mcore_io import MODEL_INFO, RELEASE, TRACKER, ModelInfo, spec_differences
from mindrl.config import ClusterResources, load_recipe
from mindrl.config.model_spec import load_model_spec
from mindrl.trainer.launch import check_loads

CPU2 = ClusterResources("cpu", 2)


def _checkpoint(root, model):
    """A checkpoint root as the converter leaves it, as far as this check reads it."""
    (root / RELEASE).mkdir(parents=True)
    (root / TRACKER).write_text(RELEASE)
    (root / RELEASE / MODEL_INFO).write_text(ModelInfo(load_model_spec(model), "fp32").to_json())
    return root


def _run(load):
    return load_recipe("grpo_tiny_cpu", [f"megatron_training.load={load}"], cluster=CPU2)


def test_the_recipe_s_own_model_passes_and_another_is_refused_naming_both(tmp_path):
    check_loads(_run(_checkpoint(tmp_path / "qwen2", "tiny-qwen2")))
    with pytest.raises(ValueError) as info:
        check_loads(_run(_checkpoint(tmp_path / "moe", "tiny-qwen3-moe")))
    text = str(info.value)
    assert text.startswith(f"megatron_training.load={tmp_path / 'moe'} holds tiny-qwen3-moe, "
                           "not the recipe's model tiny-qwen2: ")
    assert "head_dim: checkpoint 64, model 32" in text and "Fix: point megatron_training" in text


def test_a_folder_that_is_no_checkpoint_is_refused_with_the_conversion_as_fix(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)megatron_training.load=.*not a Megatron "
                                         r"checkpoint.*Fix: convert the HF checkpoint"):
        check_loads(_run(tmp_path))


def test_vocab_rows_compare_at_the_role_s_tp():
    small = load_model_spec("tiny-qwen2")
    assert spec_differences(small, small, 1) == []
    wider = dataclasses.replace(small, vocab_size=small.padded_vocab_size(2) + 1)
    assert spec_differences(wider, small, 2) == [
        f"vocab rows: checkpoint needs {wider.vocab_size}, model has {small.padded_vocab_size(2)}"]
