"""THE table of HF <-> Megatron-core tensor names and layouts (docs/design.md#model-families).

Converter, trainer checkpoint loading and the resharding engine all go through this package,
by this one entry point (``from mindrl.ckpt import mapping``). One module per family
(dense: Qwen2, Llama; qwen25_vl; qwen3; qwen3_moe), each a `family.FamilyMapping` of
rule.TensorRule tables registered in mindrl/ckpt/registry.py; decoder holds what every
decoder shares (embedding, final norm, head), vision a tower's names, layout the transforms
(fuse / unfuse, vocab padding, TP shard / gather), stacked the HF spelling that stacks a
layer's experts on one axis, and model the whole model (every rule in order, pipeline
stages, name lookup). A new architecture is one new table, registered.
"""

from mindrl.ckpt.mapping.decoder import (DERIVED_HF_SUFFIXES, EMBEDDING, FINAL_NORM, OUTPUT,
                                         SCORE, global_rules, head_rule, is_derived_hf_tensor)
from mindrl.ckpt.mapping.family import FamilyMapping
from mindrl.ckpt.mapping.layout import (fuse_qkv, gather, hf_to_mcore, mcore_part_views,
                                        mcore_to_hf, pad_vocab, shard, shards_are_row_blocks,
                                        unfuse_qkv, write_shard)
from mindrl.ckpt.mapping.model import (expected_hf_shapes, full_mcore_from_hf, hf_split,
                                       hf_tensor_names, iter_rules, layer_rules, rule_for,
                                       rules_by_mcore_suffix, stage_layers, stage_state_dict,
                                       unstack_hf, vision_rules)
from mindrl.ckpt.mapping.rule import (FUSE_GATE_UP, FUSE_NONE, FUSE_QKV, TensorRule,
                                      expand_experts)
from mindrl.ckpt.mapping.vision import VISION_PREFIX, hf_disk_name, is_vision_tensor

__all__ = [
    "DERIVED_HF_SUFFIXES", "EMBEDDING", "FINAL_NORM", "FUSE_GATE_UP", "FUSE_NONE", "FUSE_QKV",
    "FamilyMapping", "OUTPUT", "SCORE", "TensorRule", "VISION_PREFIX", "expand_experts",
    "expected_hf_shapes", "full_mcore_from_hf", "fuse_qkv", "gather", "global_rules", "head_rule",
    "hf_disk_name", "hf_split", "hf_tensor_names", "hf_to_mcore", "is_derived_hf_tensor",
    "is_vision_tensor", "iter_rules", "layer_rules", "mcore_part_views", "mcore_to_hf",
    "pad_vocab", "rule_for", "rules_by_mcore_suffix", "shard", "shards_are_row_blocks",
    "stage_layers", "stage_state_dict", "unfuse_qkv", "unstack_hf", "vision_rules", "write_shard",
]
