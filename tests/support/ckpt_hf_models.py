"""Random-init transformers models for the converter tests, built from transformers' classes.

The reference side of every parity check is transformers itself, not our hf_config / tiny
factory, so a shared mistake cannot cancel out.
"""

from pathlib import Path

import torch
import transformers

# name: (architecture, tied embeddings, query groups, vocab). 4 heads, head dim 32.
VARIANTS = {
    "qwen2_tied_g2": ("qwen2", True, 2, 126),     # qkv bias, tied, padded vocab when loaded
    "llama_untied_g1": ("llama", False, 1, 128),  # no bias, untied, MQA
    "qwen2_untied_g4": ("qwen2", False, 4, 128),  # qkv bias, untied, MHA
    "llama_tied_g2": ("llama", True, 2, 128),     # no bias, tied
}
HIDDEN, FFN, HEADS, LAYERS = 128, 256, 4, 2


def make_hf_model(architecture: str, tied: bool, groups: int, vocab: int, seed: int = 0):
    common = dict(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=groups, rms_norm_eps=1e-6, max_position_embeddings=256,
                  tie_word_embeddings=tied, rope_theta=10000.0, bos_token_id=0, eos_token_id=2,
                  pad_token_id=0)
    if architecture == "qwen2":
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        config = transformers.LlamaConfig(attention_bias=False, **common)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # non-trivial biases and norms, so that every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def save_hf(model, out: Path, max_shard_size=None, dtype=None) -> Path:
    """save_pretrained (safetensors) plus the char tokenizer, like a downloaded model dir."""
    from mindrl.models.tokenizers import build_tokenizer

    if dtype is not None:
        model = model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(out, safe_serialization=True, **kwargs)
    build_tokenizer("char").save_pretrained(out)
    return Path(out)


def read_hf_tensors(directory: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(directory).glob("*.safetensors")):
        out.update(load_file(f))
    return out
