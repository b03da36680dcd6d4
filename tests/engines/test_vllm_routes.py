"""The CPU vLLM engine's MoE routes (engines/vllm_routes.py), captured in its workers: every
token's top-k expert set equals transformers' router on the same sequence, the last token is
-1 (never routed), and the merge pads them into the Batch's rollout_routes."""

import pytest
import torch

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.models.tiny import make_tiny_model
from mindrl.rollout.merge import routes_tensor

pytestmark = pytest.mark.slow   # see tests/conftest.py

CONFIG = GenerateConfig(max_num_seqs=8, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=8, seed=0))


def test_captured_routes_equal_the_routers_of_transformers(tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = make_tiny_model("tiny-qwen3-moe", "char", tmp_path / "moe", seed=0)
    engine = VLLMEngine(model_dir, CONFIG, seed=0)
    try:
        out = engine.generate([[40, 41, 42, 43, 44, 45], [50, 60, 70]], n=2, with_routes=True)
        plain = engine.generate([[50, 60, 70]], n=1)
    finally:
        engine.close()
    assert plain.routes is None and len(out.routes) == 4
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for prompt, response, routes in zip(out.prompt_token_ids, out.response_token_ids,
                                        out.routes):
        ids = prompt + response
        assert routes.shape == (len(ids), 2, 2)
        assert (routes[-1] == -1).all()
        with torch.no_grad():
            logits = hf(torch.tensor([ids]), output_router_logits=True).router_logits
        for layer, layer_logits in enumerate(logits):
            expected = layer_logits.topk(2, dim=-1).indices.sort(-1).values[:-1]
            assert torch.equal(routes[:-1, layer].sort(-1).values, expected), layer
    padded = routes_tensor(out.routes)
    width = max(len(p) + len(r) for p, r in zip(out.prompt_token_ids, out.response_token_ids))
    assert padded.shape == (4, width, 2, 2)
    assert torch.equal(padded[1, :out.routes[1].shape[0]], out.routes[1])
