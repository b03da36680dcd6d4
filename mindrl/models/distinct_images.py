"""The vision tower runs once per distinct image of a pass.

GRPO samples n responses per prompt, so each picture comes n times into the actor's and the
reference's passes (16 copies a prompt in the geometry3k recipes, 8 in the tiny VL default).
Qwen2.5-VL's tower sees each image on its own (attention within an image's windows and
cu_seqlens, rotary positions per image), so a copy's features are its original's: the tower
runs on the distinct images and their features are repeated in place. Autograd then sums the
copies' gradients into the one tower pass, the sum separate passes would have made.

Pure functions: images are compared whole (same grid, equal patches), so two pictures that
merely look alike never share features.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch


def distinct_images(pixel_values: torch.Tensor, grid_thw: torch.Tensor
                    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[List[int]]]:
    """transformers' batch form (every image's patches [sum t*h*w, C], grids [N, 3]) ->
    (the distinct images' patches, their grids, `copy_of`: for each of the N images the index
    of its distinct image). `copy_of` is None when every image is distinct (the inputs come
    back unchanged)."""
    sizes = grid_thw.prod(-1).tolist()
    if sum(sizes) != pixel_values.shape[0]:
        raise ValueError(f"{pixel_values.shape[0]} patch rows for grids {grid_thw.tolist()} "
                         f"({sum(sizes)} patches)")
    chunks = pixel_values.split(sizes)
    by_grid: Dict[tuple, List[int]] = {}      # grid -> indices (into `firsts`) with that grid
    firsts: List[int] = []
    copy_of: List[int] = []
    for index, (chunk, grid) in enumerate(zip(chunks, map(tuple, grid_thw.tolist()))):
        same_grid = by_grid.setdefault(grid, [])
        found = next((d for d in same_grid if torch.equal(chunks[firsts[d]], chunk)), None)
        if found is None:
            found = len(firsts)
            firsts.append(index)
            same_grid.append(found)
        copy_of.append(found)
    if len(firsts) == len(chunks):
        return pixel_values, grid_thw, None
    return torch.cat([chunks[i] for i in firsts]), grid_thw[firsts], copy_of


def repeat_features(features: torch.Tensor, distinct_grids: torch.Tensor, copy_of: List[int],
                    merge_size: int) -> torch.Tensor:
    """The tower's features of the distinct images ([sum t*h*w / merge^2, H], in their order)
    -> every image's features in the original order (`copy_of` from `distinct_images`)."""
    tokens = (distinct_grids.prod(-1) // merge_size ** 2).tolist()
    if sum(tokens) != features.shape[0]:
        raise ValueError(f"{features.shape[0]} feature rows for grids "
                         f"{distinct_grids.tolist()} at merge size {merge_size}")
    parts = features.split(tokens)
    return torch.cat([parts[d] for d in copy_of])
