"""The checkpoint half of a model family: what `ckpt/registry.py` holds per HF model_type.

A family's mapping module (`mapping/<family>.py`) declares one `FamilyMapping`: its decoder
layer's tensor table (rules with `{layer}`, and `{expert}` for a Mixture-of-Experts layer),
how many experts a spec has, the vision tower's table for a vision-language family, and the
converter's --model-type-hf names that accept it. The fused groups vLLM loads as one module
are declared on the rules themselves (`TensorRule.group`).

A family whose layers differ (a MoE model's dense layers) lists every rule any layer may hold
in `layer_rules` and says which of them a given layer holds in `in_layer`; one whose HF
checkpoints may stack experts on a leading axis declares that spelling in `stacked_hf`
(mapping/stacked.py), read as the per-expert tensors its table names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from mindrl.ckpt.mapping.rule import TensorRule
from mindrl.ckpt.mapping.stacked import Stacked


def no_experts(spec: Any) -> int:
    return 0


def every_layer(spec: Any, rule: TensorRule, layer: int) -> bool:
    return True


@dataclass(frozen=True)
class FamilyMapping:
    model_type: str                                          # HF config.json model_type
    layer_rules: Callable[[Any], List[TensorRule]]           # ModelSpec -> one layer's rules
    model_type_hf: Tuple[str, ...] = ()                      # --model-type-hf names for it
    vision_rules: Optional[Callable[[Any], List[TensorRule]]] = None   # VisionSpec -> rules
    num_experts: Callable[[Any], int] = no_experts           # ModelSpec -> experts per layer
    # (ModelSpec, rule of layer_rules, layer) -> whether that layer holds the rule
    in_layer: Callable[[Any, TensorRule, int], bool] = every_layer
    stacked_hf: Tuple[Stacked, ...] = ()                     # HF spellings stacking experts

    @property
    def multimodal(self) -> bool:
        return self.vision_rules is not None
