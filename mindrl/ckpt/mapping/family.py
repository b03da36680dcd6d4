"""The checkpoint half of a model family: what `ckpt/registry.py` holds per HF model_type.

A family's mapping module (`mapping/<family>.py`) declares one `FamilyMapping`: its decoder
layer's tensor table (rules with `{layer}`, and `{expert}` for a Mixture-of-Experts layer),
how many experts a spec has, the vision tower's table for a vision-language family, and the
converter's --model-type-hf names that accept it. The fused groups vLLM loads as one module
are declared on the rules themselves (`TensorRule.group`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from mindrl.ckpt.mapping.rule import TensorRule


def no_experts(spec: Any) -> int:
    return 0


@dataclass(frozen=True)
class FamilyMapping:
    model_type: str                                          # HF config.json model_type
    layer_rules: Callable[[Any], List[TensorRule]]           # ModelSpec -> one layer's rules
    model_type_hf: Tuple[str, ...] = ()                      # --model-type-hf names for it
    vision_rules: Optional[Callable[[Any], List[TensorRule]]] = None   # VisionSpec -> rules
    num_experts: Callable[[Any], int] = no_experts           # ModelSpec -> experts per layer

    @property
    def multimodal(self) -> bool:
        return self.vision_rules is not None
