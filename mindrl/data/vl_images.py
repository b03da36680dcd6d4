"""A dataset row's images -> the resized PNG bytes preprocessing stores, once per image.

Each image is resized here to the size the Qwen2-VL processor would pick for it
(transformers' own ``smart_resize``: sides multiples of 28, pixels within the recipe's bounds),
so that at training time the processor keeps it as is and vLLM and Megatron see the same
pixels; its LLM token count is then known here, which lets preprocessing enforce
``max_prompt_length`` on the expanded ids. Bad images raise RowRejected naming the image.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from mindrl.data.handlers import RowRejected

PATCH_SIZE, MERGE_SIZE = 14, 2          # Qwen2/2.5-VL: 14-px patches, 2 x 2 merged per token
FACTOR = PATCH_SIZE * MERGE_SIZE        # a side is a multiple of 28 px


@dataclass(frozen=True)
class ResizedImage:
    png: bytes
    height: int
    width: int

    @property
    def tokens(self) -> int:
        """LLM tokens the processor expands this image's one pad into."""
        return image_token_count(self.height, self.width)


def image_token_count(height: int, width: int) -> int:
    """(h/14) * (w/14) / 4: the processor's own count for an image it does not resize."""
    return (height // PATCH_SIZE) * (width // PATCH_SIZE) // MERGE_SIZE ** 2


def image_source_bytes(entry: Any, base_dir: Optional[Path], where: str) -> bytes:
    """The encoded bytes of one image entry as geometry3k stores it: {"bytes", "path"} (bytes
    first), raw bytes, or a path (relative to the input's folder)."""
    path = None
    if isinstance(entry, dict):
        if entry.get("bytes"):
            return bytes(entry["bytes"])
        path = entry.get("path")
    elif isinstance(entry, (bytes, bytearray)):
        return bytes(entry)
    elif isinstance(entry, str):
        path = entry
    if not path:
        raise RowRejected("undecodable_image", f"{where}: neither bytes nor a path "
                                               f"({type(entry).__name__})")
    full = Path(path) if Path(path).is_absolute() or base_dir is None else base_dir / path
    try:
        return full.read_bytes()
    except OSError as e:
        raise RowRejected("missing_image", f"{where}: cannot read {full} ({e.strerror})") from None


def target_size(height: int, width: int, min_pixels: int, max_pixels: int) -> Tuple[int, int]:
    """(height, width) the image is resized to: the processor's smart_resize within the bounds."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    return smart_resize(height, width, factor=FACTOR, min_pixels=min_pixels,
                        max_pixels=max_pixels)


def scaled_short_side(height: int, width: int, min_pixels: int, max_pixels: int) -> float:
    """The short side once the image is scaled (aspect kept) into the pixel bounds, before the
    sides are rounded to 28: under 28 the rounding would stretch the image out of shape."""
    pixels = height * width
    scale = 1.0
    if pixels < min_pixels:
        scale = math.sqrt(min_pixels / pixels)
    elif pixels > max_pixels:
        scale = math.sqrt(max_pixels / pixels)
    return min(height, width) * scale


def resize_image(data: bytes, min_pixels: int, max_pixels: int, where: str) -> ResizedImage:
    """Decode, convert to RGB, resize once (bicubic) and encode as PNG; RowRejected for bytes
    that are no image, an image too small or too elongated for 28-px sides."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            rgb = image.convert("RGB")
    except UnidentifiedImageError:
        raise RowRejected("undecodable_image", f"{where}: {len(data)} bytes that PIL cannot "
                                               f"identify as an image") from None
    except (OSError, ValueError, SyntaxError) as e:     # truncated or corrupt image data
        raise RowRejected("undecodable_image", f"{where}: {type(e).__name__}: {e}") from None
    width, height = rgb.size
    short = scaled_short_side(height, width, min_pixels, max_pixels)
    if short < FACTOR:
        raise RowRejected("image_too_small", f"{where}: {width}x{height} px scales to a short "
                                             f"side of {short:.1f} px < {FACTOR} px within "
                                             f"[{min_pixels}, {max_pixels}] pixels")
    try:
        new_h, new_w = target_size(height, width, min_pixels, max_pixels)
    except ValueError as e:          # smart_resize refuses an aspect ratio over 200
        raise RowRejected("image_too_small", f"{where}: {width}x{height} px: {e}") from None
    if (new_w, new_h) != rgb.size:
        rgb = rgb.resize((new_w, new_h), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    rgb.save(buffer, format="PNG")
    return ResizedImage(buffer.getvalue(), new_h, new_w)


def resize_row_images(entries: Union[List[Any], Any], base_dir: Optional[Path],
                      min_pixels: int, max_pixels: int) -> List[ResizedImage]:
    """Every image of one row, in order; the first bad one rejects the row."""
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        entries = [entries]
    return [resize_image(image_source_bytes(entry, base_dir, f"image {i}"),
                         min_pixels, max_pixels, f"image {i}")
            for i, entry in enumerate(entries)]
