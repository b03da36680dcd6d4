"""Names of a vision-language model's processor files in an HF directory, by name only.

One definition for the three places that look for them: the recipe check before any worker
starts (config), the processor loader (models.processors) and the converter (ckpt). It lives
in config, the lowest of the three, so that config can check a directory without importing
models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

# Where an image processor's settings live: the layout of hub downloads
# (preprocessor_config.json), or transformers 5's save_pretrained, which writes them into
# processor_config.json. One of them is required for AutoProcessor to load a VL processor.
IMAGE_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# Every processor file a VL model's directory may hold (image and video preprocessing); they
# travel beside the tokenizer files.
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json",
                   "processor_config.json")


def has_image_processor(folder: Union[str, Path]) -> bool:
    """Whether `folder` holds an image processor's settings (one of IMAGE_PROCESSOR_FILES)."""
    return any((Path(folder) / name).is_file() for name in IMAGE_PROCESSOR_FILES)
