"""Image prompts made ready for both sides of a GRPO step, once per prompt.

vLLM takes token ids holding ONE `<|image_pad|>` per image plus the images themselves, and
expands each pad to the image's feature count with its own processor; Megatron takes the ids
already expanded plus the processor's `pixel_values` / `image_grid_thw`. Both sides must see
the same resized image through the same processor class, backend and pixel bounds
(docs/platforms.md#qwen25-vl-on-cpu): the driver computes the Megatron side here with
the checked processor (`models.processors.load_vl_processor`) and sends vLLM the same bounds
per request (`mm_processor_kwargs`); after every generate the rollout compares vLLM's expanded
ids with `prompt_ids` (rollout/merge.py).

Images travel as PNG bytes (compact, lossless): one object per prompt, shared by reference by
the prompt's n samples, so a pickled Batch carries each image once.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch


def decode_image(data: bytes):
    """PNG / JPEG bytes -> an RGB PIL image."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def expand_image_pads(ids: Sequence[int], grid_thw: Optional[torch.Tensor], image_pad_id: int,
                      merge_size: int) -> List[int]:
    """`ids` with image i's single pad repeated t*h*w / merge_size**2 times (its LLM tokens),
    as the processor expands a text's pads."""
    counts = [] if grid_thw is None else [int(g.prod()) // merge_size ** 2 for g in grid_thw]
    pads = sum(1 for t in ids if t == image_pad_id)
    if pads != len(counts):
        raise ValueError(f"{pads} <|image_pad|> tokens for {len(counts)} images: a prompt holds "
                         f"one pad per image (ids already expanded by an HF processor must not "
                         f"be given as rollout prompts)")
    out, image = [], 0
    for token in ids:
        if token == image_pad_id:
            out.extend([image_pad_id] * counts[image])
            image += 1
        else:
            out.append(int(token))
    return out


@dataclass(frozen=True)
class VisionPrompt:
    """One prompt's two forms and its images."""

    rollout_ids: List[int]                  # one <|image_pad|> per image: what vLLM takes
    prompt_ids: List[int]                   # pads expanded: what Megatron takes
    images: tuple                           # PNG bytes per image, in pad order
    pixel_values: Optional[torch.Tensor]    # [patches, C*T*P*P] or None (no image)
    image_grid_thw: Optional[torch.Tensor]  # [images, 3] or None


class VisionPrompts:
    """Turns prompt rows (`prompt_ids` with one pad per image, `images` as bytes) into
    `VisionPrompt`s with one processor, whose pixel bounds vLLM is given per request."""

    def __init__(self, processor, pixel_dtype: torch.dtype = torch.float32):
        """pixel_dtype: what the towers that read the pixel values compute in (bf16 halves what
        crosses to the workers; they cast to their own dtype anyway)."""
        self.processor, self.pixel_dtype = processor, pixel_dtype
        image_processor = processor.image_processor
        self.image_pad_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        self.merge_size = int(image_processor.merge_size)
        self.min_pixels, self.max_pixels = pixel_bounds(image_processor)

    @property
    def mm_processor_kwargs(self) -> dict:
        """vLLM's per-request processor settings: the trainer's pixel bounds."""
        return {"min_pixels": self.min_pixels, "max_pixels": self.max_pixels}

    def image_tokens(self, data: bytes) -> int:
        """LLM tokens an image takes after the processor's resize, read from its header alone
        (no pixel decode): what its one pad expands to (data/vl_images.py's count)."""
        from PIL import Image

        from mindrl.data.vl_images import image_token_count, target_size

        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
        return image_token_count(*target_size(height, width, self.min_pixels, self.max_pixels))

    def prompt_length(self, row: dict) -> int:
        """The expanded prompt's length (what Megatron takes and max_prompt_length bounds)."""
        images = row.get("images") or ()
        return len(row["prompt_ids"]) + sum(self.image_tokens(b) - 1 for b in images)

    def prepare(self, row: dict, where: str) -> VisionPrompt:
        """`row`'s two id forms and pixel values; `where` names the row in errors."""
        images = tuple(row.get("images") or ())
        grid = pixels = None
        if images:
            out = self.processor.image_processor(images=[decode_image(b) for b in images],
                                                 return_tensors="pt")
            pixels, grid = out["pixel_values"].to(self.pixel_dtype), out["image_grid_thw"]
        try:
            expanded = expand_image_pads(row["prompt_ids"], grid, self.image_pad_id,
                                         self.merge_size)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        return VisionPrompt(list(map(int, row["prompt_ids"])), expanded, images, pixels, grid)


def pixel_bounds(image_processor) -> tuple:
    """(min_pixels, max_pixels) of a Qwen2-VL image processor (transformers 5 keeps them in
    `size` as shortest_edge / longest_edge)."""
    size = getattr(image_processor, "size", None) or {}
    low = size.get("shortest_edge", getattr(image_processor, "min_pixels", None))
    high = size.get("longest_edge", getattr(image_processor, "max_pixels", None))
    if low is None or high is None:
        raise ValueError(f"{type(image_processor).__name__} names no pixel bounds "
                         f"(size={size!r})")
    return int(low), int(high)
