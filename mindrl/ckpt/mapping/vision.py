"""A VL model's vision-tower names, shared by the vision-language families' tables.

A vision tower that is transformers' own module (mindrl/models/families/qwen25_vl.py) keeps
its HF checkpoint names in the Megatron model, whole on every TP rank of the first pipeline
stage, so its tensors are copied as they are (never fused, padded or split).
"""

from __future__ import annotations

from typing import Tuple

from mindrl.ckpt.mapping.rule import TensorRule

VISION_PREFIX = "visual."
# A loaded transformers VL model nests its parts under `model`; checkpoints on disk (and the
# tables) use the flat names.
_HF_RUNTIME_PREFIXES = (("model.language_model.", "model."), ("model.visual.", VISION_PREFIX))


def hf_disk_name(name: str) -> str:
    """The on-disk HF name of a tensor named as in a loaded transformers model's state_dict
    (`model.language_model.layers.0...` -> `model.layers.0...`); other names are unchanged."""
    for runtime, disk in _HF_RUNTIME_PREFIXES:
        if name.startswith(runtime):
            return disk + name[len(runtime):]
    return name


def is_vision_tensor(name: str) -> bool:
    """An HF (on-disk) or Megatron name of the vision tower: the same name on both sides."""
    return name.startswith(VISION_PREFIX)


def vision_rule(name: str, *shapes: Tuple[int, ...]) -> TensorRule:
    """One vision tensor: the same name in HF (on disk) and Megatron, replicated, copied.
    vLLM fuses the tower's separate HF tensors among siblings (`mlp.gate_proj` + `mlp.up_proj`
    -> `mlp.gate_up_proj`), so its group is its module's parent (`blocks.N.mlp`)."""
    return TensorRule(VISION_PREFIX + name, (VISION_PREFIX + name,), shapes=tuple(shapes),
                      group=(VISION_PREFIX + name).rsplit(".", 2)[0])
