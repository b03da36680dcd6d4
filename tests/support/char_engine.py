"""A tiny Qwen2 with the char tokenizer and its prompts as token ids, for tests that start an
in-process vLLM engine on it (partial rollouts, the in-flight sync)."""

from transformers import AutoTokenizer

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.models.tiny import make_tiny_model


def char_model_and_prompts(out_dir, texts):
    """(the model's directory, each text's token ids)."""
    model = make_tiny_model("tiny-qwen2", "char", out_dir, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model)
    return model, [tokenizer.encode(t) for t in texts]


def engine_config(max_tokens: int, temperature: float) -> GenerateConfig:
    """Up to 16 sequences of 128 tokens, 32 MiB of KV cache, seeded sampling."""
    return GenerateConfig(max_num_seqs=16, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                          sampling_config=SamplingConfig(max_tokens=max_tokens,
                                                         temperature=temperature, seed=0))
