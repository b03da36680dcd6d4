"""HF tensors that stack one layer's experts on a leading axis, read as the per-expert tensors
the tables name.

transformers 5 holds a loaded Mixture-of-Experts layer's experts fused (Qwen3-MoE:
`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]) while its
`save_pretrained` writes them per expert (`mlp.experts.{e}.gate_proj.weight`, ...). A family
declares the stacked spelling once (`Stacked`); `split` names the per-expert parts inside a
stacked tensor and where each begins. In row-major order every part is one contiguous range
of the stacked tensor (expert e, part p starts at element (e * parts + p) * rows * cols), so a
reader serves a part as a byte range of the file: streamed, never the whole stack in memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

Shape = Tuple[int, ...]
Part = Tuple[str, Shape, int]   # (per-expert HF name, its shape, first element in the stack)


@dataclass(frozen=True)
class Stacked:
    """One stacked HF tensor [experts, len(parts) x rows, ...] and its per-expert parts.

    name: template with ``{layer}``; parts: templates with ``{layer}`` and ``{expert}``, in
    the order their rows follow each other within one expert (gate then up)."""

    name: str
    parts: Tuple[str, ...]

    def pattern(self) -> "re.Pattern[str]":
        return re.compile("^" + re.escape(self.name).replace(re.escape("{layer}"), r"(\d+)")
                          + "$")


def split(stacked: Sequence[Stacked], name: str, shape: Shape) -> Optional[List[Part]]:
    """The per-expert parts of a stored tensor ``name`` of ``shape``, or None when no
    declaration stacks it. A stacked tensor whose rows do not divide into its parts is
    refused (ValueError naming it)."""
    for decl in stacked:
        match = decl.pattern().match(name)
        if match is None:
            continue
        layer = int(match.group(1))
        if len(shape) < 2 or shape[1] % len(decl.parts):
            raise ValueError(f"tensor {name!r} of shape {tuple(shape)} is not [experts, "
                             f"{len(decl.parts)} x rows, ...] ({', '.join(decl.parts)})")
        rows = shape[1] // len(decl.parts)
        part_shape = (rows, *shape[2:])
        size = math.prod(part_shape)
        return [(template.format(layer=layer, expert=e), part_shape,
                 (e * len(decl.parts) + p) * size)
                for e in range(shape[0]) for p, template in enumerate(decl.parts)]
    return None


def unstack_state_dict(state: Dict[str, torch.Tensor], stacked: Sequence[Stacked]
                       ) -> Dict[str, torch.Tensor]:
    """A state dict with every stacked tensor replaced by its per-expert parts (views, no
    copy); other tensors as they are (a loaded transformers model's state dict, read by the
    per-expert tables)."""
    if not stacked:
        return state
    out: Dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        parts = split(stacked, name, tuple(tensor.shape))
        if parts is None:
            out[name] = tensor
            continue
        flat = tensor.reshape(-1)
        for part, shape, start in parts:
            out[part] = flat[start:start + math.prod(shape)].view(shape)
    return out
