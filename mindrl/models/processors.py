"""Qwen2.5-VL tokenizer and processor that need no model hub.

``write_vl_tokenizer_and_processor`` writes, into a checkpoint directory, what
``AutoProcessor`` / ``AutoTokenizer`` and vLLM load for a tiny Qwen2.5-VL: the char tokenizer
(``tokenizers.build_char_tokenizer``, same text ids) plus Qwen's vision special tokens, the
Qwen2-VL chat template, and a ``Qwen2_5_VLProcessor`` whose image processor has small pixel
bounds, so a CPU test image costs a few dozen LLM tokens (docs/platforms.md#qwen25-vl-on-cpu).
It returns the token ids the model's HF config must carry.

Images and videos need torchvision (the torchvision shim on CPU builds): transformers' default
image-processor backend and vLLM's both use it, so pixel values agree on the two sides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from transformers import PreTrainedTokenizerFast

from mindrl.config.hf_files import IMAGE_PROCESSOR_FILES, has_image_processor
from mindrl.models.tokenizers import ENDOFTEXT, IM_END, IM_START, _wrap, char_tokenizer_object

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
VISION_PAD = "<|vision_pad|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
# Qwen2.5's special tokens past the three the text char tokenizer has, in Qwen's id order
# (tokenizers.QWEN25_ADDED_TOKENS): 3 + 11 = Qwen's 14 special tokens.
VL_EXTRA_SPECIAL_TOKENS = (
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", VISION_START, VISION_END, VISION_PAD, IMAGE_PAD, VIDEO_PAD,
)

# Vision tower geometry the processor must match (Qwen2.5-VL's: 14-pixel patches, 2 x 2 merge,
# 2 frames per temporal patch; a still image is repeated to fill it).
PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH_SIZE = 14, 2, 2
# 56*56 and 256 patches of 14*14: 4 to 64 LLM tokens per image.
DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS = 3136, 50176

# Qwen2-VL's chat template (as Qwen ships it): a string content is text; a list content holds
# {"type": "text", "text"} / {"type": "image"} / {"type": "video"} parts, each image becoming
# <|vision_start|><|image_pad|><|vision_end|> (the processor then expands the pad).
VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_vl_tokenizer() -> PreTrainedTokenizerFast:
    """The char tokenizer with Qwen's vision special tokens after the alphabet (110 ids) and
    the Qwen2-VL chat template; ``<|im_end|>`` ends a turn, ``<|endoftext|>`` pads."""
    tok = _wrap(char_tokenizer_object(VL_EXTRA_SPECIAL_TOKENS),
                extra_special_tokens=[IM_START, IM_END, *VL_EXTRA_SPECIAL_TOKENS],
                unk_token=ENDOFTEXT)
    tok.chat_template = VL_CHAT_TEMPLATE
    return tok


def build_vl_processor(min_pixels: int = DEFAULT_MIN_PIXELS,
                       max_pixels: int = DEFAULT_MAX_PIXELS):
    """A ``Qwen2_5_VLProcessor`` over ``build_char_vl_tokenizer``; images and videos resize to
    between ``min_pixels`` and ``max_pixels`` (multiples of 28 a side)."""
    from transformers import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    if not PATCH_SIZE * PATCH_SIZE * MERGE_SIZE ** 2 <= min_pixels <= max_pixels:
        raise ValueError(f"need {(PATCH_SIZE * MERGE_SIZE) ** 2} <= min_pixels ({min_pixels}) "
                         f"<= max_pixels ({max_pixels})")
    geometry = dict(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=PATCH_SIZE,
                    merge_size=MERGE_SIZE, temporal_patch_size=TEMPORAL_PATCH_SIZE)
    return Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**geometry),
                               tokenizer=build_char_vl_tokenizer(),
                               video_processor=Qwen2VLVideoProcessor(**geometry),
                               chat_template=VL_CHAT_TEMPLATE)


def vl_token_ids(tokenizer) -> dict:
    """The ids a Qwen2.5-VL HF config (and its generation config) needs from ``tokenizer``."""
    ids = tokenizer.convert_tokens_to_ids
    return {
        "vocab_size": len(tokenizer),
        "image_token_id": ids(IMAGE_PAD), "video_token_id": ids(VIDEO_PAD),
        "vision_start_token_id": ids(VISION_START), "vision_end_token_id": ids(VISION_END),
        # the text char tokenizer's convention (tiny.make_tiny_model): <|endoftext|> is bos and
        # pad, <|im_end|> the config's eos; generation stops at either.
        "bos_token_id": tokenizer.pad_token_id, "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "generation_eos_token_ids": [tokenizer.eos_token_id, tokenizer.pad_token_id],
    }


def write_vl_tokenizer_and_processor(out_dir: Union[str, Path],
                                     min_pixels: int = DEFAULT_MIN_PIXELS,
                                     max_pixels: int = DEFAULT_MAX_PIXELS) -> dict:
    """Save the VL processor (tokenizer, image and video processors, chat template) into
    ``out_dir``; returns ``vl_token_ids`` for the model config written beside it."""
    processor = build_vl_processor(min_pixels, max_pixels)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(out_dir)
    return vl_token_ids(processor.tokenizer)


# The image-processor backend both sides must use: vLLM's Qwen2.5-VL preprocesses with
# torchvision; transformers' PIL backend gives pixel values up to 0.015 apart (2e-3 to 9e-3 in
# log-probs, docs/platforms.md#qwen25-vl-on-cpu).
IMAGE_BACKEND = "torchvision"


class ProcessorError(ValueError):
    """A VL processor that is missing or is not the one both sides must share."""


def check_vl_processor(processor, source: str) -> None:
    """Refuse a processor that would make the trainer's pixel values differ from vLLM's: not a
    Qwen2.5-VL processor, or an image processor on another backend than torchvision."""
    kind = type(processor).__name__
    if kind != "Qwen2_5_VLProcessor":
        raise ProcessorError(f"{source}: processor is {kind}, expected Qwen2_5_VLProcessor")
    backend = getattr(processor.image_processor, "backend", None)
    if backend != IMAGE_BACKEND:
        raise ProcessorError(
            f"{source}: the image processor runs on the {backend!r} backend, vLLM on "
            f"{IMAGE_BACKEND!r} (pixel values would differ); this process cannot import "
            f"torchvision: on CPU run `python -m mindrl.platforms.cpu.torchvision_shim "
            f"--install` (make setup does)")


def load_vl_processor(path: Union[str, Path]):
    """The Qwen2.5-VL processor saved in `path`, offline, checked (`check_vl_processor`); a
    directory without processor files is refused naming them and how to add them."""
    from transformers import AutoProcessor

    path = Path(path)
    if not has_image_processor(path):
        raise ProcessorError(
            f"{path}: no image processor ({' or '.join(IMAGE_PROCESSOR_FILES)}); copy the "
            f"processor files of the original HF model into this directory (or "
            f"`processor.save_pretrained(path)`), or point the key at a directory that has them")
    processor = AutoProcessor.from_pretrained(str(path), local_files_only=True)
    check_vl_processor(processor, str(path))
    return processor
