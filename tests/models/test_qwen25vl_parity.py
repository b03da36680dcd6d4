"""Megatron Qwen2.5-VL (mindrl/models/families/qwen25_vl.py) equals transformers' model.

A random tiny transformers Qwen2_5_VLForConditionalGeneration is the reference. Its weights
go through the family's loader; prompts with 0, 1 and 2 images (of different sizes) go
through both. Logits at TP1, TP2, TP2 + sequence parallel and PP2 match transformers' to
1e-5; gradients of a GRPO loss at TP2 (with and without SP) match plain torch autograd on
the transformers model tensor by tensor, vision tower included; a frozen tower gets no
gradient and stays out of the optimizer.
"""

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local

from support.qwen25vl_parity_worker import IMAGE_PAD, grpo_loss, prompts, run_layouts, tiny_vl_model

pytestmark = pytest.mark.slow   # see tests/conftest.py

LOGITS_ATOL = 1e-5
GRAD_RTOL = 1e-5


def _hf_inputs(sample):
    ids = sample["input_ids"].unsqueeze(0)
    # What the HF processor adds: transformers builds 3D positions only when it is given.
    extra = {"mm_token_type_ids": (ids == IMAGE_PAD).long()}
    if sample["pixel_values"] is not None:
        extra.update(pixel_values=sample["pixel_values"], image_grid_thw=sample["image_grid_thw"])
    return dict(input_ids=ids, **extra)


@pytest.fixture(scope="module")
def parity():
    """transformers' logits and GRPO gradients, and the Megatron ranks' results."""
    hf = tiny_vl_model()
    samples = prompts()
    with torch.no_grad():
        hf_logits = [hf(**_hf_inputs(s)).logits[0] for s in samples]

    def log_probs(b):
        ids = samples[b]["input_ids"]
        logits = hf(**_hf_inputs(samples[b])).logits[0, :-1]
        return torch.log_softmax(logits.float(), -1).gather(1, ids[1:, None])[:, 0]

    hf.zero_grad()
    grpo_loss(log_probs, samples).backward()
    hf_grads = {mapping.hf_disk_name(n): p.grad.clone() for n, p in hf.named_parameters()}
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    ranks = spawn_local(run_layouts, 2, hf.config, state, samples)
    return {"samples": samples, "hf_logits": hf_logits, "hf_grads": hf_grads,
            "rank0": ranks[0], "ranks": ranks}


def _megatron_logits(parity):
    found = {}
    for result in parity["ranks"]:
        found.update(result["logits"])
    return found


@pytest.mark.parametrize("layout", [(1, 1, False), (2, 1, False), (2, 1, True), (1, 2, False)],
                         ids=["tp1", "tp2", "tp2-sp", "pp2"])
def test_logits_match_transformers(parity, layout):
    logits = _megatron_logits(parity)[layout]
    for b, (sample, expected) in enumerate(zip(parity["samples"], parity["hf_logits"])):
        got = logits[b, :len(sample["input_ids"])]
        diff = (got - expected).abs().max().item()
        print(f"{layout} prompt with {b} image(s): max |logit diff| = {diff:.2e}")
        assert diff <= LOGITS_ATOL, f"{layout}, prompt {b}: {diff}"


def _relative_diffs(got, expected):
    assert set(got) == set(expected), set(got) ^ set(expected)
    return {n: ((got[n] - expected[n]).abs().max() / expected[n].abs().max()).item()
            for n in expected}


@pytest.mark.parametrize("sp", [False, True], ids=["tp2", "tp2-sp"])
def test_grpo_gradients_match_torch(parity, sp):
    result = parity["rank0"]["grads"][sp]
    rel = _relative_diffs(result["grads"], parity["hf_grads"])
    worst = max(rel, key=rel.get)
    vision = max(v for n, v in rel.items() if mapping.is_vision_tensor(n))
    print(f"TP2 sp={sp}: worst relative grad diff {rel[worst]:.2e} ({worst}); "
          f"vision tower worst {vision:.2e}")
    assert all(parity["hf_grads"][n].abs().max() > 0 for n in rel), "a reference grad is 0"
    bad = {n: v for n, v in rel.items() if v > GRAD_RTOL}
    assert not bad, bad


def test_frozen_vision_tower_gets_no_gradient_and_no_optimizer_state(parity):
    frozen, trained = parity["rank0"]["frozen"], parity["rank0"]["grads"][False]
    assert frozen["vision_params"] > 0
    assert not frozen["vision_requires_grad"]
    assert frozen["vision_in_optimizer"] == 0
    assert trained["vision_in_optimizer"] == trained["vision_params"]
    vision = {n: g for n, g in frozen["grads"].items() if mapping.is_vision_tensor(n)}
    assert vision and all(g is None for g in vision.values())
    # Freezing the tower leaves the language model's gradients as they were.
    text = {n: g for n, g in frozen["grads"].items() if not mapping.is_vision_tensor(n)}
    rel = _relative_diffs(text, {n: trained["grads"][n] for n in text})
    assert max(rel.values()) <= GRAD_RTOL, rel
