"""An in-process vLLM engine on a tiny Qwen2 with the char tokenizer, and three prompts as token
ids, for the tests that drive one engine step by step (partial rollouts, the in-flight sync)."""

import torch
from transformers import AutoTokenizer

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.models.tiny import make_tiny_model

TEXTS = ["12+34=", "Q: 7*8?\nA:", "hello"]
TOKENS = 40     # the in-flight tests' generation length


def start_char_engine(out_dir, max_tokens: int, temperature: float, prefix_caching=False,
                      **engine_kwargs):
    """(the engine, the model's directory, TEXTS as token ids); up to 16 sequences of 128
    tokens, 32 MiB of KV cache, seeded sampling. The caller closes the engine."""
    model = make_tiny_model("tiny-qwen2", "char", out_dir, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model)
    config = GenerateConfig(max_num_seqs=16, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                            enable_prefix_caching=prefix_caching,
                            sampling_config=SamplingConfig(max_tokens=max_tokens,
                                                           temperature=temperature, seed=0))
    engine = VLLMEngine(model, config, seed=0, **engine_kwargs)
    return engine, model, [tokenizer.encode(t) for t in TEXTS]


def perturbed_layers(weights):
    """The decoder layers' tensors plus seeded noise of 0.05 (every token's KV changes);
    embeddings, norms outside the layers and the head as they are."""
    g = torch.Generator().manual_seed(1)
    return {name: t + 0.05 * torch.randn(t.shape, generator=g) if ".layers." in name else t
            for name, t in weights.items()}
