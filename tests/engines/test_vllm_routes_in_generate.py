"""MoE routes captured during vLLM's generate itself (engines/vllm_routes.generate_with_routes):
every token's routes equal those of the prefill re-capture (`engine_routes`, one prefill per
sample) for greedy and sampled generation with n > 1, prompts of several lengths, chunked
prefill and prefix-cache hits; and the worker-side assembly of a step log by (request,
position)."""

from types import SimpleNamespace

import pytest
import torch

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.engines import vllm_routes
from mindrl.engines.vllm_routes import UNKNOWN

PROMPTS = [[40 + i % 30 for i in range(k)] for k in (3, 7, 12, 25, 40, 70)]


def _engine(tmp_path, **config):
    from mindrl.engines.vllm_engine import VLLMEngine
    from mindrl.models.tiny import make_tiny_model

    model_dir = make_tiny_model("tiny-qwen3-moe", "char", tmp_path / "moe", seed=0)
    overrides = config.pop("llm_overrides", {})
    cfg = GenerateConfig(max_num_seqs=8, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                         sampling_config=SamplingConfig(max_tokens=8, seed=0), **config)
    return VLLMEngine(model_dir, cfg, seed=0, **overrides)


def _assert_equal_to_prefill(engine, out, n_samples):
    reference = vllm_routes.engine_routes(engine.llm, out.prompt_token_ids,
                                          out.response_token_ids)
    assert len(out.routes) == len(reference) == n_samples
    for i, (prompt, response, got, want) in enumerate(zip(
            out.prompt_token_ids, out.response_token_ids, out.routes, reference)):
        assert got.shape == (len(prompt) + len(response), 2, 2), i
        assert (got[-1] == UNKNOWN).all() and (got[:-1] >= 0).all(), i
        assert torch.equal(got, want), (i, (got != want).any(-1).any(-1).nonzero().tolist())


@pytest.mark.slow
def test_routes_in_generate_equal_the_prefill_capture(tmp_path):
    engine = _engine(tmp_path)
    try:
        sampled = engine.generate(PROMPTS, n=3, with_routes=True)
        assert len({tuple(r) for r in sampled.response_token_ids}) > len(PROMPTS)
        _assert_equal_to_prefill(engine, sampled, 3 * len(PROMPTS))
        greedy = engine.generate(PROMPTS, n=1, with_routes=True, temperature=0.0)
        _assert_equal_to_prefill(engine, greedy, len(PROMPTS))
    finally:
        engine.close()


@pytest.mark.slow
def test_routes_in_generate_with_chunked_prefill_and_prefix_cache(tmp_path, monkeypatch):
    # A 16-token budget splits every prompt longer than 16 over steps (unseeded: the CPU
    # runner cannot resume a seeded generator mid-prompt, platforms/cpu/vllm_build.py).
    engine = _engine(tmp_path, enable_prefix_caching=True, block_size=32,
                     llm_overrides={"max_num_batched_tokens": 16})
    prefills = []

    def counted(llm, prompts, responses):
        prefills.append(len(prompts))
        return reference(llm, prompts, responses)

    def filled(routes, prompt, donors):
        fills.append(int((routes[:len(prompt)] == UNKNOWN).all(-1).all(-1).sum()))
        return fill(routes, prompt, donors)

    reference, fill, fills = vllm_routes.engine_routes, vllm_routes._fill_from_donors, []
    monkeypatch.setattr(vllm_routes, "_fill_from_donors", filled)
    try:
        assert engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens == 16
        monkeypatch.setattr(vllm_routes, "engine_routes", counted)
        sampled = engine.generate(PROMPTS, n=3, with_routes=True, seed=None)
        # a child served from blocks another child of the call cached is filled from that
        # child's routes (whole 32-token blocks of the prompts of 40 and 70): no prefill
        assert prefills == [] and fills and all(f % 32 == 0 for f in fills), fills
        monkeypatch.setattr(vllm_routes, "engine_routes", reference)
        _assert_equal_to_prefill(engine, sampled, 3 * len(PROMPTS))
        monkeypatch.setattr(vllm_routes, "engine_routes", counted)
        # the prompts of 40 and 70 tokens now start with blocks an earlier call cached: those
        # samples fall back to a prefill of their own
        greedy = engine.generate(PROMPTS, n=1, with_routes=True, temperature=0.0)
        assert prefills == [2]
        monkeypatch.setattr(vllm_routes, "engine_routes", reference)
        _assert_equal_to_prefill(engine, greedy, len(PROMPTS))
    finally:
        engine.close()


def _fake_worker(steps, prompts):
    runner = SimpleNamespace(_mindrl_steps=steps, _mindrl_prompts=prompts)
    return SimpleNamespace(model_runner=runner)


def test_step_log_assembles_routes_by_request_and_position():
    def rows(*ids):
        return torch.tensor([[[i, i + 1]] for i in ids])           # [T, L=1, K=2]

    steps = [  # a chunked prefill of "a" beside "b"'s whole prompt, then decodes
        (["a-0123456789abcdef", "b-fedcba9876543210"], [2, 3], torch.tensor([0, 1, 0, 1, 2]),
         rows(10, 11, 20, 21, 22)),
        (["b-fedcba9876543210", "a-0123456789abcdef"], [1, 1], torch.tensor([3, 2]),
         rows(23, 12)),
        (["a-0123456789abcdef"], [2], torch.tensor([2, 4]), rows(92, 14)),   # recomputed 2
    ]
    out = vllm_routes.stop_recording(_fake_worker(steps, {"a-0123456789abcdef": [1, 2, 3]}))
    prompt_a, a = out["a-0123456789abcdef"]
    assert prompt_a == [1, 2, 3]
    assert a[:, 0, 0].tolist() == [10, 11, 92, UNKNOWN, 14]
    assert a[3].tolist() == [[UNKNOWN, UNKNOWN]] and a[4].tolist() == [[14, 15]]
    assert out["b-fedcba9876543210"][0] is None
    assert out["b-fedcba9876543210"][1][:, 0, 1].tolist() == [21, 22, 23, 24]
    assert vllm_routes.stop_recording(_fake_worker([], {})) == {}


def test_engine_request_ids_map_to_samples():
    known = {vllm_routes.sample_request_id("7", i, 2) for i in range(2)}
    assert known == {"0_7", "1_7"}
    assert vllm_routes.sample_request_id("7", 0, 1) == "7"
    assert vllm_routes.external_id("1_7-0123456789abcdef", known) == "1_7"
    assert vllm_routes.external_id("1_7", known) == "1_7"    # ids not randomised
    assert vllm_routes.external_id("12-ab", {"12"}) == "12-ab"


class _FakeLLM:
    """What generate_with_routes asks of vllm.LLM, with a step log already assembled."""

    def __init__(self, results, logged):
        self.results, self.logged = results, logged

    def collective_rpc(self, method, args=()):
        return [{"install_step_log": 1, "start_recording": None,
                 "stop_recording": self.logged}[method.__name__]]

    def generate(self, prompts, params, use_tqdm=False):
        return self.results


def _result(request_id, prompt, *responses):
    return SimpleNamespace(request_id=request_id, prompt_token_ids=prompt, outputs=[
        SimpleNamespace(index=i, token_ids=r) for i, r in enumerate(responses)])


def test_generate_with_routes_matches_samples_and_refuses_what_it_cannot_match():
    def routed(length):             # position p routed to experts (p, p + 1) in one layer
        return torch.tensor([[[p, p + 1]] for p in range(length)])

    results = [_result("5", [1, 2, 3], [7, 8], [9]), _result("6", [4], [5, 6, 7])]
    logged = {"1_5-0123456789abcdef": ([1, 2, 3], routed(3)),     # its 2nd sample: 3 + 1 - 1
              "0_5-00000000000000ff": ([1, 2, 3], routed(5)),     # one past: async step
              "6-aaaaaaaaaaaaaaaa": ([4], routed(3))}
    _, routes = vllm_routes.generate_with_routes(_FakeLLM(results, logged), [], None)
    assert [[r.shape[0] for r in per] for per in routes] == [[5, 4], [4]]
    assert routes[0][0][:, 0, 0].tolist() == [0, 1, 2, 3, UNKNOWN]
    assert routes[0][1][:, 0, 1].tolist() == [1, 2, 3, UNKNOWN]
    assert routes[1][0][:, 0, 0].tolist() == [0, 1, 2, UNKNOWN]
    other_prompt = dict(logged, **{"6-aaaaaaaaaaaaaaaa": ([3], routed(3))})
    with pytest.raises(RuntimeError, match="another prompt"):
        vllm_routes.generate_with_routes(_FakeLLM(results, other_prompt), [], None)
    unnamed = {k.replace("6-", "x6-"): v for k, v in logged.items()}
    with pytest.raises(RuntimeError, match="no step routed request '6'"):
        vllm_routes.generate_with_routes(_FakeLLM(results, unnamed), [], None)
