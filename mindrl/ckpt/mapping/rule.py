"""One Megatron tensor and the HF tensors it is made of: the record every family's table
holds and every transform reads.

A rule's names are templates: ``{layer}`` is filled per layer when the model is walked, and
``{expert}`` (a Mixture-of-Experts layer's experts) is expanded into one rule per expert when a
family's layer table is read (`expand_experts`), so everything downstream sees per-layer rules
only. A rule's HF shapes are declared with the dimension names of `DIMS`, resolved against
the spec (`hf_shapes`), so a table never relies on a guess from the tensor's name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple, Union

# How the fused tensor is built from its HF parts.
FUSE_NONE, FUSE_QKV, FUSE_GATE_UP = "none", "qkv", "gate_up"
EXPERT = "{expert}"

Dim = Union[int, str]


def dims(spec) -> Dict[str, int]:
    """The named sizes a rule's declared shapes may use, from a ModelSpec; a MoE spec adds
    one expert's width ("moe_ffn") and the expert count ("experts")."""
    h, d = spec.hidden_size, spec.head_dim
    sizes = {"hidden": h, "head_dim": d, "q": spec.num_attention_heads * d,
             "kv": spec.num_query_groups * d, "ffn": spec.ffn_hidden_size,
             "vocab": spec.vocab_size}
    if spec.moe is not None:
        sizes.update(moe_ffn=spec.moe.ffn_hidden_size, experts=spec.moe.num_experts)
    return sizes


@dataclass(frozen=True)
class TensorRule:
    """One Megatron tensor and the HF tensors it is made of."""

    mcore: str                 # template; {layer} = layer number, {expert} = expert number
    hf: Tuple[str, ...]        # templates of the HF parts, in fusion order
    fuse: str = FUSE_NONE
    tp_dim: Optional[int] = None   # None = replicated across TP ranks
    vocab: bool = False        # rows are vocabulary (padded in Megatron)
    per_layer: bool = False
    # HF part shapes, one per part: sizes, or names of `dims` (the spec decides them).
    shapes: Optional[Tuple[Tuple[Dim, ...], ...]] = None
    # The tensors vLLM loads as one module (a bucket never splits them), a template like
    # `mcore`; None: this tensor's own Megatron module (which already holds qkv, gate/up).
    group: Optional[str] = None

    def mcore_name(self, layer: Optional[int] = None) -> str:
        return self.mcore.format(layer=layer)

    def hf_names(self, layer: Optional[int] = None) -> Tuple[str, ...]:
        return tuple(n.format(layer=layer) for n in self.hf)

    def group_name(self, layer: Optional[int] = None) -> str:
        """The fused group this tensor reaches vLLM in (see `group`)."""
        return (self.group or self.mcore.rsplit(".", 1)[0]).format(layer=layer)

    @property
    def per_expert(self) -> bool:
        return EXPERT in self.mcore

    def for_expert(self, expert: int) -> "TensorRule":
        """This rule with ``{expert}`` filled in (names and group alike)."""
        def fill(template: str) -> str:
            return template.replace(EXPERT, str(expert))

        return dataclasses.replace(self, mcore=fill(self.mcore),
                                   hf=tuple(fill(n) for n in self.hf),
                                   group=fill(self.group) if self.group else None)


def expand_experts(rules: Iterable[TensorRule], num_experts: int) -> List[TensorRule]:
    """A layer table with every ``{expert}`` rule replaced by one rule per expert, in expert
    order, where the template stood; a table of a model without experts must have none."""
    out: List[TensorRule] = []
    for rule in rules:
        if not rule.per_expert:
            out.append(rule)
        elif num_experts < 1:
            raise ValueError(f"{rule.mcore}: an {EXPERT} rule in the table of a model without "
                             f"experts")
        else:
            out.extend(rule.for_expert(e) for e in range(num_experts))
    return out


def hf_shapes(rule: TensorRule, spec) -> Tuple[Tuple[int, ...], ...]:
    """The shapes the HF parts of ``rule`` must have for ``spec``: its declared shapes with
    their dimension names resolved. A rule without declared shapes is refused: no shape is
    guessed from a tensor's name (a per-head norm is [head_dim], not [hidden])."""
    if rule.shapes is None:
        raise ValueError(f"{rule.mcore}: the rule declares no HF shapes; give it shapes=... "
                         f"(sizes or names of {sorted(dims(spec))})")
    if len(rule.shapes) != len(rule.hf):
        raise ValueError(f"{rule.mcore}: {len(rule.shapes)} shapes for {len(rule.hf)} HF parts")
    sizes = dims(spec)
    return tuple(tuple(sizes[d] if isinstance(d, str) else d for d in shape)
                 for shape in rule.shapes)
