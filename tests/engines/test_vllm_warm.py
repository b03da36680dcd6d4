"""The preload server's vLLM warm-up (engines/vllm_warm.py): after it, the sampler helper
serves any vocabulary and batch without compiling again, and counts exactly."""

import pytest
import torch

from mindrl.engines.vllm_warm import compile_sampler_helpers

pytestmark = pytest.mark.slow   # imports vLLM and compiles: about 15 s (tests/conftest.py)


def test_after_the_warm_up_any_vocabulary_reuses_the_graph_and_counts_exactly():
    from torch._dynamo.utils import counters
    from vllm.v1.sample.ops.logprobs import batched_count_greater_than

    compile_sampler_helpers()
    graphs = counters["stats"]["unique_graphs"]
    torch.manual_seed(0)
    for batch, vocab in ((33, 151936), (1, 1000), (5, 128)):
        with torch.inference_mode():      # as vLLM's sampler: logprobs, then the sampled ones
            logprobs = torch.randn(batch, vocab).log_softmax(-1)
            sampled = logprobs.gather(-1, torch.randint(vocab, (batch, 1)))
            torch._dynamo.decorators.mark_unbacked(logprobs, 0)
            torch._dynamo.decorators.mark_unbacked(sampled, 0)
            ranks = batched_count_greater_than(logprobs, sampled)
            assert torch.equal(ranks, (logprobs >= sampled).sum(-1))
    assert counters["stats"]["unique_graphs"] == graphs      # nothing compiled again
