"""Qwen3-MoE weight updates in vLLM's CPU build: its fused-MoE kernel packs the experts at the
first load only, so every load path must re-run that preparation (`refresh_moe_layers`), and
the fingerprints must read the experts through the kernel to see when it did not.

One in-process vLLM (``packed`` loads, where the refresh can be switched off) and one in a
child process with plain linears (``in_place`` loads); ``reload`` is the TP2 path of
tests/weight_sync/test_qwen3_moe_sync.py.
"""

import re

import pytest
from safetensors.torch import load_file

from mindrl import device
from mindrl.ckpt.fingerprint import checkpoint_fingerprint
from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.engines.vllm_process import VLLMEngineProcess
from mindrl.errors import WeightSyncError
from mindrl.models.tiny import make_tiny_model

from support.hf_logprobs import max_diff, transformers_log_probs


TOL = 1e-4
PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70]]
CONFIG = GenerateConfig(max_num_seqs=8, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=12, seed=0))
EXPERT = re.compile(r"model\.layers\.\d\.mlp\.experts\.\d\.(gate|up|down)_proj\.weight")


# ---------------------------------------------------------------------------- real vLLM engines

@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_moe")
    return [make_tiny_model("tiny-qwen3-moe", "char", root / f"seed{s}", seed=s) for s in (0, 1)]


@pytest.fixture(scope="module")
def engine(model_dirs):
    eng = VLLMEngine(model_dirs[0], CONFIG, seed=0)
    yield eng
    eng.close()


def load(engine, model_dir):
    """Every tensor of a checkpoint, one vLLM module per load (as a sync's buckets do)."""
    by_module = {}
    for name, tensor in load_file(str(model_dir / "model.safetensors")).items():
        by_module.setdefault(engine.module_of[name], []).append((name, tensor))
    for bucket in by_module.values():
        engine.load_weights(bucket)


def gap(engine, model_dir) -> float:
    out = engine.generate(PROMPTS, n=2)
    return max_diff(out, transformers_log_probs(model_dir, out))


@pytest.mark.slow   # vLLM engines: see tests/conftest.py
def test_every_expert_is_a_tensor_of_its_own_under_its_hf_name(engine, model_dirs):
    """Experts are named and shaped from vLLM's expert mapping, one vLLM module per layer
    (a load must carry all of a layer's experts), and read through the kernel they equal
    the checkpoint's."""
    experts = sorted(n for n in engine.hf_shapes if EXPERT.fullmatch(n))
    assert len(experts) == 2 * 8 * 3
    assert engine.hf_shapes["model.layers.0.mlp.experts.7.gate_proj.weight"] == (64, 128)
    assert engine.hf_shapes["model.layers.1.mlp.experts.0.down_proj.weight"] == (128, 64)
    assert {engine.module_of[n] for n in experts} == {
        f"model.layers.{i}.mlp.experts.routed_experts" for i in (0, 1)}
    assert engine.load_mode == "packed"
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[0], engine.dtype))
    assert gap(engine, model_dirs[0]) <= TOL


@pytest.mark.slow   # vLLM engines: see tests/conftest.py
def test_new_expert_weights_are_repacked_after_every_load(engine, model_dirs, monkeypatch):
    load(engine, model_dirs[1])
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))
    assert gap(engine, model_dirs[1]) <= TOL
    load(engine, model_dirs[0])                 # and back: the second update is right too
    assert gap(engine, model_dirs[0]) <= TOL

    # Without the kernel's preparation the same load is silently wrong, and only a
    # fingerprint read through the kernel says so, naming the experts.
    build = type(device.vllm_build())
    monkeypatch.setattr(build, "refresh_moe_layers", staticmethod(lambda model, names=None: 0))
    load(engine, model_dirs[1])
    stale = gap(engine, model_dirs[1])
    assert stale > 1e-2, stale
    with pytest.raises(WeightSyncError) as caught:
        engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))
    named = re.findall(r"(\S+): vLLM digest", str(caught.value))
    assert named and all(EXPERT.fullmatch(n) for n in named), named
    assert "48 vLLM tensor(s) differ" in str(caught.value)
    monkeypatch.undo()
    load(engine, model_dirs[1])
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))


def _share(worker):
    """The CPU build's share_weights on this worker's model (refused before it moves anything)."""
    return device.vllm_build().share_weights(worker.model_runner.get_model(), "/nonexistent",
                                             {})


@pytest.mark.slow   # vLLM engines: see tests/conftest.py
def test_expert_layers_cannot_be_shared_with_the_actor(engine):
    """Sharing vLLM's parameters with the actor's ranks is refused for a MoE model: the kernel
    computes with a packed copy that writers of plain bytes cannot reach. The refusal names
    the key to change."""
    with pytest.raises(Exception, match="generate_config.cpu_weights: packed"):
        engine.llm.collective_rpc(_share)


@pytest.mark.slow   # vLLM engines: see tests/conftest.py
def test_plain_linears_load_experts_in_place(model_dirs):
    """``in_place`` (plain linears, a child process: the switch is process-wide) writes the
    experts through vLLM's loader and re-packs them too."""
    child = VLLMEngineProcess(model_dirs[0], CONFIG, seed=0, plain_cpu_linears=True)
    try:
        assert child.load_mode == "in_place"
        load(child, model_dirs[1])
        child.check_fingerprint(checkpoint_fingerprint(model_dirs[1], child.dtype))
        assert gap(child, model_dirs[1]) <= TOL
    finally:
        child.close()
