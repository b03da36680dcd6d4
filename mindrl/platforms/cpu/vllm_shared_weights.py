"""The record of vLLM's CPU weights moved into one shared file (generate_config.cpu_weights
"shared"): where each tensor lives, so that the actor's ranks, which have no vLLM, write new
weights straight into the engine's parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch


@dataclass(frozen=True)
class SharedWeights:
    """Where vLLM's weights live when they are shared: a /dev/shm file of `numel` elements of
    `dtype`, and each tensor's (element offset, shape) in it under the engine's own name."""

    path: str
    numel: int
    dtype: torch.dtype
    places: Dict[str, Tuple[int, Tuple[int, ...]]]
    # The model's checkpoint-prefix renames (vLLM's hf_to_vllm_mapper), applied in order as
    # vLLM does: the writers are Megatron ranks without vLLM.
    renames: Tuple[Tuple[str, str], ...] = ()

    def place(self, name: str) -> Tuple[int, Tuple[int, ...]]:
        """(offset, shape) of a tensor named as HF or as the engine names it."""
        for prefix, new in self.renames:
            if name.startswith(prefix):
                name = new + name[len(prefix):]
        if name not in self.places:
            raise KeyError(f"{name}: not among vLLM's shared weights")
        return self.places[name]


def prefix_renames(mapper) -> Tuple[Tuple[str, str], ...]:
    """A vLLM WeightsMapper's prefix renames, for `SharedWeights`; other kinds of rule are
    refused (the writers could not follow them)."""
    if mapper is None:
        return ()
    others = [kind for kind in ("orig_to_new_renaming", "orig_to_new_regex",
                                "orig_to_new_substr", "orig_to_new_stacked",
                                "orig_to_new_suffix") if getattr(mapper, kind, None)]
    if others or any(new is None for new in mapper.orig_to_new_prefix.values()):
        raise NotImplementedError(f"shared weights: the model renames checkpoint tensors by "
                                  f"{others or 'dropping prefixes'}; use the shm bucket "
                                  f"(cpu_weights other than shared)")
    return tuple(mapper.orig_to_new_prefix.items())
