"""What every decoder family's checkpoint shares: the embedding, the final norm and the head
(lm_head, tied, or a reward model's score), and the helper a family's layer table is written
with. A family's own layer table lives in `mapping/<family>.py`."""

from __future__ import annotations

from typing import List, Optional, Sequence

from mindrl.ckpt.mapping.rule import TensorRule
from mindrl.config.model_spec import ModelSpec


def layer_rule(mcore: str, hf: Sequence[str], **kw) -> TensorRule:
    """A per-layer rule: Megatron's `decoder.layers.{layer}.` and HF's `model.layers.{layer}.`
    prefixed to the names (and to the group, if one is declared)."""
    group = kw.pop("group", None)
    return TensorRule("decoder.layers.{layer}." + mcore,
                      tuple("model.layers.{layer}." + n for n in hf), per_layer=True,
                      group="decoder.layers.{layer}." + group if group else None, **kw)


EMBEDDING = TensorRule("embedding.word_embeddings.weight", ("model.embed_tokens.weight",),
                       tp_dim=0, vocab=True, shapes=(("vocab", "hidden"),))
FINAL_NORM = TensorRule("decoder.final_layernorm.weight", ("model.norm.weight",),
                        shapes=(("hidden",),))
OUTPUT = TensorRule("output_layer.weight", ("lm_head.weight",), tp_dim=0, vocab=True,
                    shapes=(("vocab", "hidden"),))
# A reward model (spec.head "scalar", HF *ForSequenceClassification with num_labels=1): the
# [1, hidden] score replaces the LM head under the same Megatron name, replicated over TP.
SCORE = TensorRule("output_layer.weight", ("score.weight",), shapes=((1, "hidden"),))


def head_rule(spec: ModelSpec) -> Optional[TensorRule]:
    """The output layer's rule: score (reward model), lm_head (untied) or None (tied: the
    embedding serves as the output layer)."""
    if spec.head == "scalar":
        return SCORE
    return None if spec.tied_embeddings else OUTPUT


def global_rules(spec: ModelSpec) -> List[TensorRule]:
    """Non-layer tensors as stored in HF: lm_head only when embeddings are untied; score for
    a reward model."""
    head = head_rule(spec)
    return [EMBEDDING, FINAL_NORM] + ([head] if head else [])


# HF tensors that are derived buffers, not weights (older Llama checkpoints store RoPE's
# inv_freq); a converter may skip them without losing anything.
DERIVED_HF_SUFFIXES = ("rotary_emb.inv_freq",)


def is_derived_hf_tensor(name: str) -> bool:
    return name.endswith(DERIVED_HF_SUFFIXES)
