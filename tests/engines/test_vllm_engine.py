"""The vLLM rollout engine on CPU: sampling, logprobs vs transformers, weight loads, fingerprints.

One in-process vLLM for the module. The last test breaks it on purpose (a failed load is fatal).
"""

import os

import pytest
import torch
from transformers import AutoTokenizer

from mindrl.ckpt.fingerprint import (checkpoint_fingerprint, compare_fingerprints,
                                     fingerprint_tensors)
from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.engines.vllm_engine import VLLMEngine
from mindrl.engines.vllm_settings import llm_kwargs, sampling_params
from mindrl.engines.vllm_process import VLLMEngineProcess
from mindrl.errors import WeightSyncError
from mindrl.shared_memory import SHM_DIR, creator_pid
from mindrl.models.tiny import make_tiny_model
from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild
from mindrl.platforms.vllm_build import VLLMBuild
from mindrl.weight_sync.target import WeightTarget

from support.hf_logprobs import max_diff, transformers_log_probs

N = 4
MAX_TOKENS = 16
TOL = 1e-4
TEXTS = ["12+34=", "Q: 7*8?\nA:", "hello"]
CONFIG = GenerateConfig(max_num_seqs=16, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=MAX_TOKENS, seed=0))


# ---------------------------------------------------------------------------- no vLLM needed

def test_rollout_tensors_follow_the_data_contract():
    out = RolloutOutput(prompt_token_ids=[[5, 6, 7], [5, 6, 7], [8], [8]],
                        response_token_ids=[[10, 11, 2], [12], [13, 14, 15, 16], []],
                        log_probs=[[-1.0, -2.0, -3.0], [-4.0], [-.5, -.6, -.7, -.8], []],
                        finish_reasons=["stop", "length", "length", "length"],
                        prompt_index=[0, 0, 1, 1])
    b = out.to_batch(pad_id=0)
    assert b["prompt_ids"].tolist() == [[5, 6, 7], [5, 6, 7], [0, 0, 8], [0, 0, 8]]
    assert b["prompt_mask"].tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert b["response_ids"].tolist() == [[10, 11, 2, 0], [12, 0, 0, 0], [13, 14, 15, 16],
                                          [0, 0, 0, 0]]
    # EOS (2) counts, the padding after it does not.
    assert b["response_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert b["rollout_log_probs"][0].tolist() == [-1.0, -2.0, -3.0, 0.0]
    assert b["rollout_log_probs"].dtype == torch.float32
    fixed = out.to_batch(pad_id=0, prompt_length=5, response_length=6)
    assert fixed["prompt_ids"].shape == (4, 5) and fixed["response_ids"].shape == (4, 6)
    with pytest.raises(ValueError, match="more than the length 3"):
        out.response_tensors(pad_id=0, length=3)


def test_cpu_settings_are_the_engines_own():
    cpu = llm_kwargs(GenerateConfig(), seed=1, logprobs_mode="processed_logprobs",
                     build=CPUVLLMBuild())
    assert (cpu["dtype"], cpu["enforce_eager"], cpu["block_size"]) == ("float32", True, 32)
    assert cpu["kv_cache_memory_bytes"] > 0 and "gpu_memory_utilization" not in cpu
    assert cpu["enable_prefix_caching"] is False
    # Never a split prefill on CPU: its seeded sampling cannot rewind (vllm_build.py).
    small = GenerateConfig(max_num_seqs=128, max_model_len=128, max_num_batched_tokens=4096)
    assert llm_kwargs(small, seed=1, logprobs_mode="processed_logprobs",
                      build=CPUVLLMBuild())["max_num_batched_tokens"] == 128 * 128
    gpu = llm_kwargs(GenerateConfig(), seed=1, logprobs_mode="processed_logprobs",
                     build=VLLMBuild())
    assert gpu["dtype"] == "bfloat16" and gpu["enable_sleep_mode"] is False
    asleep = llm_kwargs(GenerateConfig(sleep_level=1), seed=1, logprobs_mode="processed_logprobs",
                        build=VLLMBuild())
    assert asleep["enable_sleep_mode"] is True
    params = sampling_params(SamplingConfig(), n=3, temperature=0.5, max_tokens=7)
    assert (params.n, params.temperature, params.max_tokens) == (3, 0.5, 7)
    with pytest.raises(ValueError, match="temprature"):
        sampling_params(SamplingConfig(), n=1, temprature=0.5)


def test_fingerprint_sees_swapped_and_permuted_tensors():
    g = torch.Generator().manual_seed(0)
    gate, up, bias = (torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g),
                      torch.randn(64, generator=g))
    ref = fingerprint_tensors([("gate", gate), ("up", up), ("b", bias)])
    same = fingerprint_tensors([("gate", gate.clone()), ("up", up.clone()), ("b", bias.clone())])
    assert compare_fingerprints(same, ref, torch.float32) == []
    swapped = fingerprint_tensors([("gate", up), ("up", gate), ("b", bias.flip(0))])
    assert len(compare_fingerprints(swapped, ref, torch.float32)) == 3
    rows = fingerprint_tensors([("gate", gate[torch.randperm(64, generator=g)]), ("up", up),
                                ("b", bias)])
    assert [p.split(":")[0] for p in compare_fingerprints(rows, ref, torch.float32)] == ["gate"]
    nan = {**ref, "b": torch.full((3,), float("nan"), dtype=torch.float64)}
    assert [p.split(":")[0] for p in compare_fingerprints(nan, ref, torch.float32)] == ["b"]
    extra = {**ref, "stale": ref["b"]}
    assert "never loaded" in compare_fingerprints(extra, ref, torch.float32)[0]


def test_refuses_to_start_inside_a_distributed_world():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="VLLMEngineProcess"):
            VLLMEngine("/nonexistent", CONFIG)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- one real vLLM

@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_engine")
    return (make_tiny_model("tiny-qwen2", "char", root / "seed0", seed=0),
            make_tiny_model("tiny-qwen2", "char", root / "seed1", seed=1))


@pytest.fixture(scope="module")
def engine(model_dirs):
    eng = VLLMEngine(model_dirs[0], CONFIG, seed=0)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reload_engine(model_dirs):
    """vLLM's own reload path (the GPU/NPU one), kept tested on CPU; in a child process, as
    vLLM's in-process world allows one engine per process."""
    eng = VLLMEngineProcess(model_dirs[0], CONFIG, seed=0, load_mode="reload")
    yield eng
    eng.close()
    # The child leaves vLLM to its exit (close(process_ends=True)) but no shared memory.
    assert eng.process.exitcode == 0
    assert [name for name in os.listdir(SHM_DIR) if creator_pid(name) == eng.process.pid] == []


@pytest.fixture(scope="module")
def prompts(model_dirs):
    tok = AutoTokenizer.from_pretrained(model_dirs[0])
    return [tok.encode(t) for t in TEXTS]


@pytest.mark.slow
def test_generate_n_samples_per_prompt_in_prompt_major_order(engine, prompts):
    out = engine.generate(prompts, n=N)
    assert len(out) == len(prompts) * N
    assert out.prompt_index == [i for i in range(len(prompts)) for _ in range(N)]
    assert out.prompt_token_ids == [p for p in prompts for _ in range(N)]
    assert set(out.finish_reasons) <= {"stop", "length"}
    for ids, logps, reason in zip(out.response_token_ids, out.log_probs, out.finish_reasons):
        assert len(ids) == len(logps) and 1 <= len(ids) <= MAX_TOKENS
        assert all(lp <= 0 for lp in logps)
        assert (reason == "length") == (len(ids) == MAX_TOKENS and ids[-1] not in (0, 2))
    # Seeded: repeatable, and no two samples share a random stream.
    again = engine.generate(prompts, n=N)
    assert again.response_token_ids == out.response_token_ids
    twins = engine.generate([prompts[0], prompts[0]], n=1)
    assert twins.response_token_ids[0] != twins.response_token_ids[1]
    assert engine.generate(prompts, n=N, seed=1).response_token_ids != out.response_token_ids


def _graphs_compiled(worker) -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.mark.slow
def test_sampling_compiles_nothing(engine, prompts):
    """vLLM's `torch.compile`d helpers (the sampler's log-prob ranks) run as plain functions
    on CPU: a first generate compiled them with inductor (1.6 s, platforms/cpu/vllm_worker.py)."""
    engine.generate(prompts, n=2)
    assert engine.llm.collective_rpc(_graphs_compiled) == [0]


@pytest.mark.slow
def test_ignore_eos_gives_exactly_max_tokens(engine, prompts):
    out = engine.generate(prompts, n=2, ignore_eos=True)
    assert {len(ids) for ids in out.response_token_ids} == {MAX_TOKENS}
    assert set(out.finish_reasons) == {"length"}


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_transformers(engine, prompts, model_dirs, temperature):
    out = engine.generate(prompts, n=N, temperature=temperature)
    diff = max_diff(out, transformers_log_probs(model_dirs[0], out, temperature))
    assert diff <= TOL, diff


@pytest.mark.slow
def test_score_gives_the_same_logprobs_as_sampling(engine, prompts):
    out = engine.generate(prompts, n=2)
    scored = engine.score(out.prompt_token_ids, out.response_token_ids)
    for a, b in zip(scored, out.log_probs):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=TOL)


@pytest.mark.slow
def test_fingerprint_equals_the_checkpoint(engine, model_dirs):
    ref = checkpoint_fingerprint(model_dirs[0], engine.dtype)
    got = engine.fingerprint()
    assert set(got) == set(ref)
    assert got["model.embed_tokens.weight"].shape == (2, 3)   # stored + used by the tied head
    engine.check_fingerprint(ref)
    with pytest.raises(WeightSyncError, match=r"26 vLLM tensor\(s\) differ"):
        engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["packed", "reload"])
def test_load_weights_in_buckets_switches_the_model(engine, reload_engine, prompts, model_dirs,
                                                    mode):
    """Load another checkpoint module by module: vLLM then computes exactly that model (the
    tied output head included, whose packed copy the plain reload leaves stale on CPU)."""
    from safetensors.torch import load_file

    engine = engine if mode == "packed" else reload_engine
    assert engine.load_mode == mode
    state = load_file(str(model_dirs[1] / "model.safetensors"))
    by_module = {}
    for name, tensor in state.items():
        by_module.setdefault(engine.module_of[name], []).append((name, tensor))
    for bucket in by_module.values():
        engine.load_weights(bucket)
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))
    out = engine.generate(prompts, n=2)
    diff = max_diff(out, transformers_log_probs(model_dirs[1], out))
    assert diff <= TOL, diff
    engine.load_weights(state.items())   # all at once works too
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))


def _compute_with_plain_weight(worker, module_name):
    """vLLM's own opt-out of the CPU pack (MLA's kv_b_proj): the layer keeps its weight."""
    worker.model_runner.get_model().get_submodule(module_name)._cpu_skip_gemm_dispatch = True


@pytest.mark.slow
def test_a_layer_that_keeps_its_weight_owns_it(engine, model_dirs):
    """The packed loader hands a linear a view of the caller's buffer; a layer that computes
    with that weight itself must copy it, or the next bucket would overwrite it."""
    from safetensors.torch import load_file

    module = "model.layers.0.self_attn.o_proj"
    state = load_file(str(model_dirs[1] / "model.safetensors"))
    engine.load_weights(state.items())      # seed 1 everywhere, whichever test ran before
    engine.llm.collective_rpc(_compute_with_plain_weight, args=(module,))
    buffer = state[module + ".weight"].clone()
    engine.load_weights([(module + ".weight", buffer)])
    buffer.fill_(float("nan"))
    engine.check_fingerprint(checkpoint_fingerprint(model_dirs[1], engine.dtype))


@pytest.mark.slow
@pytest.mark.parametrize("side", ["in_process", "child_process"])
def test_an_early_digest_counts_only_while_the_weights_are_unchanged(engine, reload_engine,
                                                                      model_dirs, side):
    """`start_fingerprint` digests now for the next check (a verified sync overlaps it with
    the actor's expected fingerprints); a load after it makes the check digest again, or the
    old weights' digest would pass for the new ones."""
    from safetensors.torch import load_file

    eng = engine if side == "in_process" else reload_engine
    states = [load_file(str(d / "model.safetensors")) for d in model_dirs]
    refs = [checkpoint_fingerprint(d, eng.dtype) for d in model_dirs]
    eng.load_weights(states[0].items())
    eng.start_fingerprint()
    if side == "in_process":
        assert eng._early_digest is not None
    eng.check_fingerprint(refs[0])
    if side == "in_process":
        assert eng._early_digest is None          # used once
    eng.start_fingerprint()
    eng.load_weights(states[1].items())           # the weights change after the digest
    eng.check_fingerprint(refs[1])
    eng.start_fingerprint()
    with pytest.raises(WeightSyncError, match="differ from the expected weights"):
        eng.check_fingerprint(refs[0])
    eng.start_fingerprint()
    eng.fingerprint()                             # any call in between reads its reply first
    eng.check_fingerprint(refs[1])


@pytest.mark.slow
def test_every_engine_side_is_a_weight_target(engine, reload_engine):
    """The transports call the WeightTarget members without probing: every engine side has
    them all, and says whether its loads run in the background (two buckets in flight)."""
    from mindrl.weight_sync.node_relay import RelayTarget

    relay = RelayTarget(engine, group=None, host_rank=0, nodes=[])
    for target, background in ((engine, False), (reload_engine, True), (relay, False)):
        assert isinstance(target, WeightTarget), type(target).__name__
        assert target.loads_in_background is background


@pytest.mark.slow
def test_a_load_submitted_from_a_shared_file_is_whole_when_it_returns(engine, model_dirs):
    """In-process, `submit_load_from_bucket` loads before it returns: the shm bucket's single
    buffer may be refilled at once."""
    from safetensors.torch import load_file

    from mindrl.shared_memory import SharedRegion, shm_path

    state = sorted(load_file(str(model_dirs[0] / "model.safetensors")).items())
    entries, offset = [], 0
    for name, t in state:
        entries.append((name, offset, tuple(t.shape)))
        offset += t.numel()
    region = SharedRegion(shm_path("mindrl-test", os.getpid(), "submit"), offset,
                          engine.dtype, create=True)
    try:
        for (_, start, _), (_, t) in zip(entries, state):
            region.tensor[start:start + t.numel()].copy_(t.reshape(-1))
        wait = engine.submit_load_from_bucket(region.path, region.numel, engine.dtype, entries)
        region.tensor.fill_(float("nan"))          # nothing may still read the file
        wait()
        engine.check_fingerprint(checkpoint_fingerprint(model_dirs[0], engine.dtype))
    finally:
        engine.release_bucket(None)
        region.close()


@pytest.mark.slow
def test_bad_loads_are_refused_by_name_and_are_fatal(engine, model_dirs):
    """Checks that fire before vLLM is touched; each marks the engine unusable (a sync may
    already have loaded earlier buckets), so the test clears that flag between cases."""
    good = torch.zeros(256, 128)
    cases = [([("model.layers.0.mlp.gate_proj.weight", torch.zeros(255, 128)),
               ("model.layers.0.mlp.up_proj.weight", good)], "gate_proj.weight: shape"),
             ([("model.layers.0.mlp.gate_projj.weight", good)], "gate_projj.weight: vLLM's model"),
             ([("model.layers.0.self_attn.q_proj.weight", torch.zeros(128, 128))],
              r"without \['model.layers.0.self_attn.k_proj.bias'")]
    for pairs, message in cases:
        with pytest.raises(WeightSyncError, match=message):
            engine.load_weights(pairs)
        with pytest.raises(WeightSyncError, match="unusable"):
            engine.generate([[5, 6]], n=1)
        engine._failure = None   # vLLM itself was not touched by these


@pytest.mark.slow
def test_a_failed_load_inside_vllm_is_fatal(engine):
    """Last in the module: this really breaks the engine's weights."""
    meta = torch.empty(128, device="meta")
    with pytest.raises(WeightSyncError, match="model.norm.weight"):
        engine.load_weights([("model.norm.weight", meta)])
    for call in (lambda: engine.generate([[5, 6]], n=1), engine.fingerprint,
                 lambda: engine.load_weights([])):
        with pytest.raises(WeightSyncError, match="unusable"):
            call()


def test_close_before_the_process_ends_leaves_no_teardown_for_the_exit():
    """vLLM's in-process client runs its engine's teardown (a whole-heap collection, about
    1.3 CPU-s per engine measured) from a finalizer, at exit if not before: a close for a
    process that ends next detaches it; an ordinary close tears down once."""
    import weakref
    from types import SimpleNamespace

    class Client:                                  # vLLM's InprocClient's two parts used
        def __init__(self):
            self.shutdowns = 0
            self._finalizer = weakref.finalize(self, self.count)

        def count(self):
            self.shutdowns += 1

        def shutdown(self):
            self._finalizer()

    def closed(process_ends):
        engine = VLLMEngine.__new__(VLLMEngine)
        client = Client()
        engine.llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=client))
        engine.shared_weights, engine.worker_start, engine._segments = None, "in-process", []
        engine.build = SimpleNamespace(release_segments=lambda segments: None)
        engine.close(process_ends=process_ends)
        return client

    ending = closed(process_ends=True)
    assert not ending._finalizer.alive and ending.shutdowns == 0
    staying = closed(process_ends=False)
    assert not staying._finalizer.alive and staying.shutdowns == 1
