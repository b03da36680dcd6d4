"""With shared CPU weights (cpu_weights: shared) the actor writes new weights straight into the
memory vLLM computes with and calls nothing (engines/vllm_engine.py `resets_lazily`): the next
generate's `weights_version` says the weights changed, and the engine drops the prefix cache
computed from the old ones before it runs. Without that reset a cached prompt's KV from the old
weights would be served (shown here: the same prompt at the same version after the write gives
other log-probs than a fresh computation). Its own file: one in-process vLLM per process."""

import math

import pytest
from safetensors.torch import load_file
from support.char_engine import perturbed_layers, start_char_engine

from mindrl.shared_memory import SharedRegion

pytestmark = pytest.mark.slow

LONG = "12+34=46;" * 5       # 45 characters: two full KV blocks the prefix cache keeps


def _logprobs(engine, prompt, version):
    return engine.generate([prompt], n=1, weights_version=version).log_probs[0]


def test_a_new_version_drops_the_prefix_cache_of_the_old_weights(tmp_path):
    engine, model, _ = start_char_engine(tmp_path / "model", 4, 0.0, prefix_caching=True,
                                         plain_cpu_linears=True, share_weights=True)
    try:
        assert engine.resets_lazily and engine.describe()["resets_lazily"]
        from transformers import AutoTokenizer

        prompt = AutoTokenizer.from_pretrained(model).encode(LONG)
        before = _logprobs(engine, prompt, 0)
        assert _logprobs(engine, prompt, 0) == before          # served from the cache, alike
        shared = engine.shared_weights
        region = SharedRegion(shared.path, shared.numel, shared.dtype, create=False)
        new = perturbed_layers(load_file(str(model / "model.safetensors")))
        for name, (offset, shape) in shared.places.items():   # what the actor's ranks do
            region.tensor[offset:offset + math.prod(shape)].view(shape).copy_(new[name])
        epoch = engine._weights_epoch
        stale = _logprobs(engine, prompt, 0)                   # same version: nothing reset
        assert engine._weights_epoch == epoch
        after = _logprobs(engine, prompt, 1)                   # the new version: reset first
        assert engine._weights_epoch == epoch + 1
        engine.llm.reset_prefix_cache()
        fresh = _logprobs(engine, prompt, 1)                   # computed from scratch
        assert after == fresh != before
        assert stale != fresh        # the cached KV of the old weights: what the reset prevents
    finally:
        engine.close()
