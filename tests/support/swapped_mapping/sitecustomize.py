"""Test hook: in Ray worker processes only (the actor ranks that send weights, never the
driver that converts checkpoints), the qwen2 mapping lists gate_proj / up_proj the wrong way
round, as a bad edit of mindrl/ckpt/mapping/ would. Put this directory on PYTHONPATH."""

import sys

if any(arg.endswith("default_worker.py") for arg in sys.argv):
    import dataclasses

    from mindrl.ckpt import mapping, registry

    _original = registry.mapping_of("qwen2")

    def _swapped(spec):
        rules = []
        for rule in _original.layer_rules(spec):
            if rule.fuse == mapping.FUSE_GATE_UP:
                rule = dataclasses.replace(rule, hf=tuple(reversed(rule.hf)))
            rules.append(rule)
        return rules

    registry.replace_mapping(dataclasses.replace(_original, layer_rules=_swapped))
