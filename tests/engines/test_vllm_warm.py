"""The preload server's vLLM warm-ups (engines/vllm_warm.py): after them, the sampler helper
serves any vocabulary and batch without compiling again, and counts exactly; the CPU kernel
overrides are in place once, and an engine's own registration leaves them as they are."""

import pytest
import torch

from mindrl.engines.vllm_warm import compile_sampler_helpers, register_kernel_overrides

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


def test_kernel_overrides_are_registered_once_and_a_worker_s_call_keeps_them():
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON, dispatcher
    from vllm.v1.sample import rejection_sampler

    if HAS_TRITON:
        pytest.skip("with Triton-CPU vLLM registers no override")
    register_kernel_overrides()
    registry = dict(dispatcher._registry)
    swapped = rejection_sampler.expand_kernel
    assert len(registry) >= 10 and isinstance(swapped, dispatcher.KernelOverride)
    current_platform.register_triton_kernel_overrides()     # as each worker's constructor
    assert dispatcher._registry == registry and rejection_sampler.expand_kernel is swapped
    # the swapped kernel runs vLLM's C++ fallback: each request's value over its tokens (a 2
    # replaced by 7)
    out = torch.zeros(5, dtype=torch.int64)
    swapped[(2,)](out, torch.tensor([1, 2]), torch.tensor([2, 5]), replace_from=2,
                  replace_to=7, MAX_NUM_TOKENS=3)
    assert out.tolist() == [1, 1, 7, 7, 7]
