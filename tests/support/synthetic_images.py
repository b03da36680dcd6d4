"""Seeded synthetic RGB images, identical in every process that asks for the same one."""


def synthetic_image(height: int, width: int, seed: int):
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)   # uint8 [H, W, 3]: RGB
