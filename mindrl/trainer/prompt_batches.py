"""Prompt rows -> the step's Batch, for text and vision-language models alike.

A text model's Batch is its prompts repeated n times. A VL model's also carries, per prompt
(shared by reference by its n samples, so each image crosses to the workers once): the ids
vLLM takes (`rollout_prompt_ids`, one `<|image_pad|>` per image), the images (`images`, PNG
bytes), and what the actor's passes take (`pixel_values`, `image_grid_thw`), with the expanded
ids as the Batch's `prompt_ids` (data/vl_prompts.py). vLLM gets the processor's pixel bounds
with every request (`rollout_kwargs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from mindrl.data.batch import ROLLOUT_ONLY, Batch   # ROLLOUT_ONLY: what vLLM alone reads
from mindrl.data.prompt_rows import load_prompt_source, per_prompt_fields
from mindrl.data.vl_prompts import VisionPrompts


class PromptBatches:
    def __init__(self, tokenizer, extra_keys: Sequence[str], max_prompt_length: int,
                 vision: Optional[VisionPrompts] = None):
        self.tokenizer, self.extra_keys = tokenizer, list(extra_keys)
        self.max_prompt_length, self.vision = max_prompt_length, vision
        self.pad_id = tokenizer.pad_token_id or 0

    @classmethod
    def for_model(cls, tokenizer_path: str, spec, extra_keys: Sequence[str],
                  max_prompt_length: int, pixel_dtype: str = "float32") -> "PromptBatches":
        """A VL model (`spec.vision`) reads its checked processor from `tokenizer_path`
        (models.processors.load_vl_processor), a text model its tokenizer; pixel values go
        out in `pixel_dtype` (RunConfig.pixel_dtype)."""
        if spec is not None and spec.vision is not None:
            from mindrl.models.processors import load_vl_processor

            processor = load_vl_processor(tokenizer_path)
            return cls(processor.tokenizer, extra_keys, max_prompt_length,
                       VisionPrompts(processor, getattr(torch, pixel_dtype)))
        from mindrl.models.tokenizers import load_tokenizer

        return cls(load_tokenizer(tokenizer_path), extra_keys, max_prompt_length)

    @property
    def rollout_kwargs(self) -> dict:
        return {} if self.vision is None else {
            "mm_processor_kwargs": self.vision.mm_processor_kwargs}

    def rows(self, path: str, rejects_path: Path, log: Callable[[str], None],
             finish: Optional[Callable[[List[int]], List[int]]] = None
             ) -> tuple[List[dict], int]:
        """A prompt source's rows and how many were over max_prompt_length (skipped, listed
        in `rejects_path`; data/prompt_rows.py); `finish` rewrites each row's ids first."""
        return load_prompt_source(path, self.extra_keys, self.max_prompt_length,
                                  lambda text: self.tokenizer(text)["input_ids"], rejects_path,
                                  log, None if self.vision is None else self.vision.prompt_length,
                                  finish)

    def for_workers(self, batch: Batch) -> Batch:
        """The Batch the Megatron roles take: without what only vLLM reads (the PNG images and
        the one-pad ids), so the images reach the actor once, as pixel values."""
        return batch.without(*ROLLOUT_ONLY)

    def batch(self, rows: List[dict], n: int) -> Batch:
        fields = per_prompt_fields(rows, self.extra_keys)
        if self.vision is None:
            return Batch.from_prompts([r["prompt_ids"] for r in rows], n, self.pad_id, **fields)
        prompts = [self.vision.prepare(r, f"prompt {i} of the step") for i, r in enumerate(rows)]
        return Batch.from_prompts(
            [p.prompt_ids for p in prompts], n, self.pad_id, **fields,
            rollout_prompt_ids=[p.rollout_ids for p in prompts],
            images=[p.images for p in prompts], pixel_values=[p.pixel_values for p in prompts],
            image_grid_thw=[p.image_grid_thw for p in prompts])


def image_metrics(batch: Batch, merge_size: int = 2) -> Dict[str, float]:
    """vision/image_tokens/{mean,max}: LLM tokens the images of a sample take (0 for a text
    batch: the keys are absent)."""
    if "image_grid_thw" not in batch:
        return {}
    tokens = torch.tensor([0 if g is None else int(g.prod(-1).sum()) // merge_size ** 2
                           for g in batch["image_grid_thw"]], dtype=torch.float32)
    return {"vision/image_tokens/mean": float(tokens.mean()),
            "vision/image_tokens/max": float(tokens.max())}
