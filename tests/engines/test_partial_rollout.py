"""Continuation from the prefix is exact: one in-process vLLM generating greedily in chunks of
2 tokens (rollout/partial.generate_in_chunks), weights unchanged, gives the whole
generation's tokens and sampled log-probs."""

import pytest
from transformers import AutoTokenizer

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.models.tiny import make_tiny_model
from mindrl.rollout.partial import generate_in_chunks

MAX_TOKENS = 9
TEXTS = ["12+34=", "Q: 7*8?\nA:", "hello"]
CONFIG = GenerateConfig(max_num_seqs=16, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=MAX_TOKENS, temperature=0.0,
                                                       seed=0))


@pytest.mark.slow
def test_chunks_of_2_tokens_give_the_whole_generation_exactly(tmp_path):
    model = make_tiny_model("tiny-qwen2", "char", tmp_path / "model", seed=0)
    prompts = [AutoTokenizer.from_pretrained(model).encode(t) for t in TEXTS]
    engine = VLLMEngine(model, CONFIG, seed=0)
    try:
        whole = engine.generate(prompts, n=1)      # greedy: vLLM allows n=1 only
        chunked, versions = generate_in_chunks(engine.generate, prompts, n=1,
                                               max_tokens=MAX_TOKENS, chunk=2, seed=0)
        assert max(map(len, whole.response_token_ids)) > 4      # 3+ chunks for some
        # A continued sample also stops at EOS: the 9-token budget is the whole one.
        assert chunked.response_token_ids == whole.response_token_ids
        assert chunked.finish_reasons == whole.finish_reasons
        assert chunked.prompt_token_ids == whole.prompt_token_ids
        assert chunked.prompt_index == whole.prompt_index
        for ours, theirs in zip(chunked.log_probs, whole.log_probs):
            assert len(ours) == len(theirs)
            assert max((abs(a - b) for a, b in zip(ours, theirs)), default=0.0) < 1e-5
        assert versions == [[0] * len(ids) for ids in whole.response_token_ids]
    finally:
        engine.close()
