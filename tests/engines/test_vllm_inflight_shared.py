"""The in-flight sync with shared CPU weights (cpu_weights: shared, engines/vllm_inflight.py):
the actor's ranks write the engine's second buffer, laid out as vLLM's shared file, and the
commit copies it in whole. Its own file: one in-process vLLM per process at a time, and
test_vllm_inflight.py's module engine is packed."""

import math

import pytest
from safetensors.torch import load_file
from support.char_engine import TOKENS, perturbed_layers, start_char_engine

from mindrl.ckpt.fingerprint import fingerprint_tensors
from mindrl.shared_memory import SharedRegion

pytestmark = pytest.mark.slow


def test_with_shared_weights_the_actor_writes_the_second_buffer_and_the_commit_copies_it(
        tmp_path):
    """cpu_weights: shared. The engine hands the actor its staging file instead of vLLM's
    live one (same layout): writes there change nothing vLLM computes with until the commit,
    which copies the whole buffer in; the fingerprints then are the new weights'."""
    engine, model, _ = start_char_engine(tmp_path / "model", TOKENS, 1.0, plain_cpu_linears=True,
                                         share_weights=True, inflight_sync="keep_kv")
    try:
        weights = load_file(str(model / "model.safetensors"))
        record = engine.describe()["shared_weights"]
        assert record.path != engine.shared_weights.path     # the second buffer, not vLLM's
        assert record.places == engine.shared_weights.places
        new = perturbed_layers(weights)
        staging = SharedRegion(record.path, record.numel, record.dtype, create=False)
        for name, (offset, shape) in record.places.items():
            staging.tensor[offset:offset + math.prod(shape)].view(shape).copy_(new[name])
        engine.check_fingerprint(fingerprint_tensors(weights.items(), engine.dtype))  # unchanged
        engine.weights_written()
        engine.check_fingerprint(fingerprint_tensors(new.items(), engine.dtype))
        assert engine.inflight.commits == 1
    finally:
        engine.close()
