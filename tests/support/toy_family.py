"""A toy family, "toyllama": a renamed copy of the llama family, registered from outside the
package as a new family would be (both halves, plus config's name list), and removed after.
Importable by spawned converter ranks, which register it again in their own process."""

import dataclasses

import transformers

from mindrl.ckpt import registry
from mindrl.ckpt.mapping.dense import LLAMA
from mindrl.config import names
from mindrl.models.families.dense import LlamaFamily

MODEL_TYPE = "toyllama"


class ToyLlamaConfig(transformers.LlamaConfig):
    model_type = MODEL_TYPE


class ToyLlamaFamily(LlamaFamily):
    model_type = MODEL_TYPE

    def config_class(self):
        return ToyLlamaConfig


MAPPING = dataclasses.replace(LLAMA, model_type=MODEL_TYPE, model_type_hf=(MODEL_TYPE,))


def register() -> tuple:
    """Register the toy family; returns config's name list as it was (for `unregister`)."""
    before = names.ARCHITECTURES
    registry.register(ToyLlamaFamily(), MAPPING)
    names.ARCHITECTURES = before + (MODEL_TYPE,)
    return before


def unregister(architectures: tuple) -> None:
    registry.unregister(MODEL_TYPE)
    names.ARCHITECTURES = architectures


def tiny_model(seed: int = 0):
    """A random 2-layer toyllama (GQA, untied), non-trivial norms so every tensor matters."""
    import torch

    config = ToyLlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, tie_word_embeddings=False,
                            rms_norm_eps=1e-6, attention_bias=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def run_conversions(rank, world_size, jobs):
    """The converter jobs (support.ckpt_convert_worker) with the toy family registered."""
    from support.ckpt_convert_worker import run_conversions as run

    architectures = register()
    try:
        return run(rank, world_size, jobs)
    finally:
        unregister(architectures)
