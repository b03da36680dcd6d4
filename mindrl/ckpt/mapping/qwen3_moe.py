"""Qwen3-MoE's tensor table: Qwen3's attention (q/k norms, no qkv bias; mapping/qwen3.py) and,
on a MoE layer (spec.moe.is_moe_layer), the router and the experts in place of the dense MLP;
a dense layer (HF mlp_only_layers) keeps Qwen3's MLP.

- router: Megatron `mlp.router.weight` [E, H] <-> HF `mlp.gate.weight`, replicated over TP.
- experts (SequentialMLP; at expert parallelism 1 the local index is the global one):
  `mlp.experts.local_experts.{expert}.linear_fc1.weight` <-> HF
  `mlp.experts.{expert}.gate_proj.weight` + `up_proj.weight` (fused [gate; up], split over TP
  by rows like the dense MLP) and `...linear_fc2.weight` <-> `down_proj.weight` (split by
  columns). All of one layer's expert tensors are ONE fused group: vLLM loads them into one
  FusedMoE module (`mlp.experts`: w13_weight [E, 2I, H], w2_weight [E, H, I]), so a weight-sync
  bucket never splits them.
- HF spellings: `save_pretrained` writes the per-expert names above; a loaded transformers
  model holds each layer's experts stacked (`mlp.experts.gate_up_proj` [E, 2I, H], per expert
  [gate; up], and `mlp.experts.down_proj` [E, H, I]): declared in `STACKED`, read as the
  per-expert tensors (mapping/stacked.py). Written back per expert, as save_pretrained does.
"""

from __future__ import annotations

from typing import List

from mindrl.ckpt.mapping.decoder import layer_rule
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.qwen3 import qwen3_layer_rules
from mindrl.ckpt.mapping.rule import FUSE_GATE_UP, TensorRule
from mindrl.ckpt.mapping.stacked import Stacked
from mindrl.config.model_spec import ModelSpec

_EXPERTS = "mlp.experts"          # the Megatron module vLLM's FusedMoE stands for
_MOE_MLP = (".mlp.router.", f".{_EXPERTS}.")
_DENSE_MLP = (".mlp.linear_fc1.", ".mlp.linear_fc2.")


def moe_mlp_rules() -> List[TensorRule]:
    """A MoE layer's MLP: the router and one {expert} rule per expert tensor."""
    expert = "mlp.experts.local_experts.{expert}."
    hf = "mlp.experts.{expert}."
    return [
        layer_rule("mlp.router.weight", ["mlp.gate.weight"], shapes=(("experts", "hidden"),)),
        layer_rule(expert + "linear_fc1.weight", [hf + "gate_proj.weight", hf + "up_proj.weight"],
                   fuse=FUSE_GATE_UP, tp_dim=0, shapes=(("moe_ffn", "hidden"),) * 2,
                   group=_EXPERTS),
        layer_rule(expert + "linear_fc2.weight", [hf + "down_proj.weight"], tp_dim=1,
                   shapes=(("hidden", "moe_ffn"),), group=_EXPERTS),
    ]


def qwen3_moe_layer_rules(spec: ModelSpec) -> List[TensorRule]:
    """Every rule a layer may hold: Qwen3's (its dense MLP only when some layer is dense),
    the MoE MLP after them."""
    rules = qwen3_layer_rules(spec)
    if all(map(spec.moe.is_moe_layer, range(spec.num_layers))):
        rules = [r for r in rules if not _is(r, _DENSE_MLP)]
    return rules + moe_mlp_rules()


def in_layer(spec: ModelSpec, rule: TensorRule, layer: int) -> bool:
    """A MoE layer holds the router and experts, a dense layer the dense MLP; both the rest."""
    if _is(rule, _MOE_MLP):
        return spec.moe.is_moe_layer(layer)
    if _is(rule, _DENSE_MLP):
        return not spec.moe.is_moe_layer(layer)
    return True


def _is(rule: TensorRule, parts) -> bool:
    return any(part in rule.mcore for part in parts)


def num_experts(spec: ModelSpec) -> int:
    return spec.moe.num_experts


STACKED = (
    Stacked("model.layers.{layer}.mlp.experts.gate_up_proj",
            ("model.layers.{layer}.mlp.experts.{expert}.gate_proj.weight",
             "model.layers.{layer}.mlp.experts.{expert}.up_proj.weight")),
    Stacked("model.layers.{layer}.mlp.experts.down_proj",
            ("model.layers.{layer}.mlp.experts.{expert}.down_proj.weight",)),
)

# "qwen3-moe" is MindSpeed-LLM's --model-type-hf spelling (first: trainer/prepare.py converts
# with it), "qwen3_moe" HF's model_type.
MAPPING = FamilyMapping("qwen3_moe", qwen3_moe_layer_rules, model_type_hf=("qwen3-moe",
                                                                          "qwen3_moe"),
                        num_experts=num_experts, in_layer=in_layer,
                        stacked_hf=STACKED)
