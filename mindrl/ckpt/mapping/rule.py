"""One Megatron tensor and the HF tensors it is made of: the record every family's table
holds and every transform reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

# How the fused tensor is built from its HF parts.
FUSE_NONE, FUSE_QKV, FUSE_GATE_UP = "none", "qkv", "gate_up"


@dataclass(frozen=True)
class TensorRule:
    """One Megatron tensor and the HF tensors it is made of."""

    mcore: str                 # template; {layer} = layer number
    hf: Tuple[str, ...]        # templates of the HF parts, in fusion order
    fuse: str = FUSE_NONE
    tp_dim: Optional[int] = None   # None = replicated across TP ranks
    vocab: bool = False        # rows are vocabulary (padded in Megatron)
    per_layer: bool = False
    # HF part shapes, for tables whose shapes are not the decoder's (the vision tower's).
    shapes: Optional[Tuple[Tuple[int, ...], ...]] = None

    def mcore_name(self, layer: Optional[int] = None) -> str:
        return self.mcore.format(layer=layer)

    def hf_names(self, layer: Optional[int] = None) -> Tuple[str, ...]:
        return tuple(n.format(layer=layer) for n in self.hf)


def family_rules(tables: Dict[str, Callable[[Any], List[TensorRule]]], family: str, spec: Any,
                 what: str) -> List[TensorRule]:
    """The rules of ``family``'s table for ``spec``; a family with no table is refused naming
    ``what`` it is and the known families."""
    if family not in tables:
        raise ValueError(f"no {what} {family!r}; known: {sorted(tables)}")
    return tables[family](spec)
