"""The step's Batch for a VL model (trainer/prompt_batches.py): each prompt's images and pixel
values are shared by its n samples, so what the Megatron roles receive per step holds each
unique image once (<= 1.1 x the unique pixel values' bytes, the rest being the token tensors);
what only vLLM reads never reaches them; an overlong prompt is counted by its expanded length."""

import io
import pickle

import pytest
import torch

from mindrl.data.vl_prompts import VisionPrompts
from mindrl.models.processors import build_vl_processor
from mindrl.trainer.prompt_batches import ROLLOUT_ONLY, PromptBatches
from support.synthetic_images import synthetic_image

N = 8


def png(height, width, seed) -> bytes:
    out = io.BytesIO()
    synthetic_image(height, width, seed).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def prompts():
    processor = build_vl_processor()
    return PromptBatches(processor.tokenizer, [], 4096, VisionPrompts(processor))


def rows(prompts, sizes):
    processor = prompts.vision.processor
    out = []
    for i, images in enumerate(sizes):
        content = [{"type": "image"}] * len(images) + [{"type": "text", "text": "Colour?"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
        out.append({"prompt_ids": processor.tokenizer(text)["input_ids"], "label": str(i),
                    "images": [png(h, w, s) for h, w, s in images]})
    return out


def test_the_workers_get_each_image_once_as_pixel_values(prompts):
    batch = prompts.batch(rows(prompts, [[(112, 112, 0)], [(84, 140, 1), (56, 56, 2)], []]), N)
    assert len(batch) == 3 * N
    # The n samples of a prompt share one tensor: no copy per sample.
    assert batch["pixel_values"][0] is batch["pixel_values"][N - 1]
    shipped = prompts.for_workers(batch)
    assert not any(name in shipped for name in ROLLOUT_ONLY)
    assert all(name in batch for name in ROLLOUT_ONLY)      # the rollout's Batch keeps them
    unique = sum(p.numel() * p.element_size() for p in batch["pixel_values"][::N]
                 if p is not None)
    sent = len(pickle.dumps(shipped))
    tokens = sum(t.numel() * t.element_size() for t in shipped.tensors.values())
    print(f"shipped {sent} bytes: unique pixel values {unique}, token tensors {tokens}")
    assert sent <= 1.1 * unique + tokens
    # A copy per sample (what a per-row list of clones would send) is N times larger.
    cloned = shipped.without("pixel_values").add(
        pixel_values=[None if p is None else p.clone() for p in shipped["pixel_values"]])
    assert len(pickle.dumps(cloned)) > 4 * unique


def test_an_image_prompt_is_as_long_as_its_expanded_ids(prompts):
    row = rows(prompts, [[(112, 84, 0), (56, 56, 1)]])[0]
    expanded = prompts.vision.prepare(row, "row 0").prompt_ids
    # 112 x 84 -> 4 x 3 merged patches, 56 x 56 -> 2 x 2: 12 + 4 tokens for 2 pads.
    assert prompts.vision.prompt_length(row) == len(expanded) == len(row["prompt_ids"]) + 14


def test_bf16_towers_get_bf16_pixel_values_at_half_the_bytes(prompts):
    processor = prompts.vision.processor
    row = rows(prompts, [[(112, 112, 0)]])[0]
    fp32 = VisionPrompts(processor).prepare(row, "row 0").pixel_values
    bf16 = VisionPrompts(processor, torch.bfloat16).prepare(row, "row 0").pixel_values
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert torch.equal(bf16, fp32.to(torch.bfloat16))
    assert bf16.numel() * bf16.element_size() * 2 == fp32.numel() * fp32.element_size()
