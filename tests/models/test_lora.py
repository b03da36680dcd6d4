"""LoRA on the Megatron engine (models/lora.py): a fresh adapter is the base model exactly,
only adapters train, TP / SP / PP layouts train alike, the merged weights are the adapted
model, and the adapters off give the base back."""

import dataclasses

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.models import lora

from support.engine_batch import make_batch
from support.hf_reference import reference_hf_model
from support.lora_worker import base_log_probs, train_at_layouts

pytestmark = pytest.mark.slow   # see tests/conftest.py

LAYOUTS = [(1, 1), (2, 1), (2, 1, True), (1, 2)]


@pytest.fixture(scope="module")
def trained():
    spec = dataclasses.replace(load_model_spec("tiny-qwen2"), vocab_size=126,
                               make_vocab_size_divisible_by=4)
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    batches = [make_batch(spec.vocab_size, seed=s) for s in range(3)]
    results = spawn_local(train_at_layouts, 2, spec, full_by_tp, batches, LAYOUTS)[0]
    base = spawn_local(base_log_probs, 1, spec, full_by_tp, batches[0])[0]
    keep = batches[0]["response_mask"].bool()
    return results, base, keep


def test_a_fresh_adapter_is_the_base_model_exactly(trained):
    results, base, keep = trained
    for layout in LAYOUTS:
        start = results[layout]["start"]
        assert torch.equal(start[keep], base[keep]) or layout != (1, 1), layout
        assert (start - base)[keep].abs().max() <= 1e-5, layout


def test_only_the_adapters_train(trained):
    results, _, _ = trained
    for layout in LAYOUTS:
        res = results[layout]
        assert res["base_moved"] == [], layout
        assert res["optimized"] == ["lora_a", "lora_b"], layout
        assert res["grad_buffers"] == ["lora_a", "lora_b"], layout
        # 2 layers x 4 targets, spread over the stages (rank 0 holds stage 0's at PP 2).
        assert res["adapted"] == (8 if layout[1] == 1 else 4), layout
        moved = (res["steps"][-1] - res["start"]).abs().max()
        assert moved > 1e-2, (layout, moved)       # the adapters changed the model


def test_every_layout_trains_as_tp1_does(trained):
    results, _, keep = trained
    ref = results[(1, 1)]
    for layout in LAYOUTS[1:]:
        for step, (got, want) in enumerate(zip(results[layout]["steps"], ref["steps"])):
            gap = (got - want)[keep].abs().max()
            assert gap <= 2e-5, (layout, step, gap)


def test_adapters_off_give_the_base_and_merged_weights_the_adapted_model(trained):
    results, base, keep = trained
    for layout in LAYOUTS:
        res = results[layout]
        assert (res["off"] - base)[keep].abs().max() <= 1e-5, layout
        assert (res["merged"] - res["steps"][-1])[keep].abs().max() <= 2e-5, layout


def test_adapter_names_and_targets():
    assert lora.is_adapter_name("decoder.layers.0.self_attention.linear_qkv.lora_a")
    assert not lora.is_adapter_name("decoder.layers.0.self_attention.linear_qkv.weight")
    assert lora.LoraSpec(rank=8, alpha=16).scale == 2.0
