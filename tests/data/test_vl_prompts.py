"""Image prompts for both sides (mindrl/data/vl_prompts.py): the ids vLLM takes (one pad per
image), the expansion Megatron takes, and the pixel values, all equal to what the HF processor
gives for the same chat; ids already expanded are refused naming the row."""

import io

import pytest
import torch

from mindrl.data.vl_prompts import VisionPrompts, decode_image, expand_image_pads
from mindrl.models.processors import build_vl_processor
from support.synthetic_images import synthetic_image

# 0, 1 and 2 images (height, width, seed); 300 x 200 is downscaled by the processor to
# 252 x 168.
IMAGES = [[], [(56, 84, 0)], [(84, 56, 1), (300, 200, 4)]]


def png(spec) -> bytes:
    out = io.BytesIO()
    synthetic_image(*spec).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def processor():
    return build_vl_processor()


def chat(processor, n_images):
    content = [{"type": "image"}] * n_images + [{"type": "text", "text": "How many?"}]
    return processor.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("specs", IMAGES, ids=["text", "one", "two"])
def test_both_forms_equal_the_processor_s(processor, specs):
    text = chat(processor, len(specs))
    raw = processor.tokenizer(text)["input_ids"]
    prompt = VisionPrompts(processor).prepare(
        {"prompt_ids": raw, "images": [png(s) for s in specs]}, "row 3")
    kwargs = {"images": [decode_image(png(s)) for s in specs]} if specs else {}
    ref = processor(text=[text], return_tensors="pt", **kwargs)
    assert prompt.rollout_ids == raw
    assert prompt.prompt_ids == ref["input_ids"][0].tolist()
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert raw.count(pad) == len(specs)
    if specs:
        assert torch.equal(prompt.pixel_values, ref["pixel_values"])
        assert torch.equal(prompt.image_grid_thw, ref["image_grid_thw"])
        assert prompt.prompt_ids.count(pad) == int(ref["image_grid_thw"].prod(-1).sum()) // 4
    else:
        assert prompt.pixel_values is None and prompt.image_grid_thw is None
    if len(specs) == 2:
        assert prompt.image_grid_thw[1].tolist() == [1, 18, 12]    # 252 x 168 pixels (h x w)


def test_expanded_ids_given_as_rollout_ids_are_refused_naming_the_row(processor):
    text = chat(processor, 1)
    expanded = processor(text=[text], images=[synthetic_image(56, 84, 0)])["input_ids"][0]
    with pytest.raises(ValueError, match=r"row 7: 6 <\|image_pad\|> tokens for 1 images"):
        VisionPrompts(processor).prepare({"prompt_ids": list(expanded),
                                          "images": [png((56, 84, 0))]}, "row 7")


def test_expand_counts_each_grid_and_the_bounds_reach_vllm(processor):
    grids = torch.tensor([[1, 4, 6], [1, 2, 2]])
    assert expand_image_pads([5, 9, 6, 9], grids, 9, 2) == [5] + [9] * 6 + [6, 9]
    assert VisionPrompts(processor).mm_processor_kwargs == {"min_pixels": 3136,
                                                            "max_pixels": 50176}
