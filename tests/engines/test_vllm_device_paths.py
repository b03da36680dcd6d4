"""The engine's paths for builds other than the CPU one, checked without a device: what vLLM is
asked for (expert parallelism inside an engine, routes returned by vLLM itself) per device
kind's build, the returned routes in the Batch's layout, the expert digests of ranks that hold
whole experts adding up to the tensor's, and that every vLLM name these paths use exists in
the installed vLLM (a rename there fails here, not on a lent device)."""

import dataclasses

import numpy as np
import pytest
import torch

from mindrl.ckpt.fingerprint import digest, probe
from mindrl.config.schema import GenerateConfig
from mindrl.engines.vllm_fingerprint import expert_place
from mindrl.engines.vllm_routes import UNKNOWN, returned_routes
from mindrl.engines.vllm_settings import llm_kwargs
from mindrl.platforms.cpu.vllm_build import CPUVLLMBuild
from mindrl.platforms.vllm_build import VLLMBuild

BUILDS = {"cpu": CPUVLLMBuild(), "cuda": VLLMBuild("cuda"), "npu": VLLMBuild("npu")}


def kwargs(kind, routes=False, **config):
    cfg = dataclasses.replace(GenerateConfig(), **config)
    return llm_kwargs(cfg, seed=0, logprobs_mode="processed_logprobs", build=BUILDS[kind],
                      routes=routes)


def test_vllm_returns_the_routes_only_on_cuda_with_its_prefix_cache_and_one_stage():
    assert kwargs("cuda", routes=True, enable_prefix_caching=True)[
        "enable_return_routed_experts"] is True
    for kind, config in (("cuda", {"enable_prefix_caching": False}),
                         ("cuda", {"enable_prefix_caching": True,
                                   "infer_pipeline_parallel_size": 2}),
                         ("npu", {"enable_prefix_caching": True}),      # captured there
                         ("cpu", {"enable_prefix_caching": True})):
        assert "enable_return_routed_experts" not in kwargs(kind, routes=True, **config), kind
    assert "enable_return_routed_experts" not in kwargs("cuda", enable_prefix_caching=True)


@pytest.mark.parametrize("config", [{"enable_expert_parallel": True},
                                    {"infer_expert_parallel_size": 2}])
def test_vllm_expert_parallelism_is_asked_for_where_the_build_runs_it(config):
    config = {"infer_tensor_parallel_size": 2, **config}
    for kind in ("cuda", "npu"):
        assert kwargs(kind, **config)["enable_expert_parallel"] is True
    with pytest.raises(ValueError, match="infer_expert_parallel_size: this vLLM build cannot "
                                         "run expert parallelism.*set them to false / 1"):
        kwargs("cpu", **config)
    assert "enable_expert_parallel" not in kwargs("cuda")


def _request(request_id, prompt, samples):
    from vllm.outputs import CompletionOutput, RequestOutput

    outputs = [CompletionOutput(index=i, text="", token_ids=tokens, cumulative_logprob=None,
                                logprobs=None, routed_experts=rows)
               for i, (tokens, rows) in samples]
    return RequestOutput(request_id, None, prompt, None, outputs, finished=True)


def test_returned_routes_take_the_captures_layout():
    """vLLM's routed_experts cover every token it fed ([P + R - 1, L, K]); the Batch's
    rollout routes are [P + R, L, K] with the last token never routed, per sample by index."""
    g = np.random.default_rng(0)
    a = g.integers(0, 8, size=(3 + 2 - 1, 2, 2))
    b = g.integers(0, 8, size=(3 + 4 - 1, 2, 2))
    c = g.integers(0, 8, size=(5 + 1 - 1, 2, 2))
    results = [_request("0", [1, 2, 3], [(1, ([7, 8, 9, 10], b)), (0, ([5, 6], a))]),
               _request("1", [1, 2, 3, 4, 5], [(0, ([6], c))])]
    [[first, second], [third]] = returned_routes(results)
    for got, rows in ((first, a), (second, b), (third, c)):
        assert got.dtype == torch.long and got.shape == (rows.shape[0] + 1, 2, 2)
        assert torch.equal(got[:-1], torch.as_tensor(rows)) and (got[-1] == UNKNOWN).all()


def test_returned_routes_missing_or_misshapen_are_refused_naming_the_request():
    with pytest.raises(RuntimeError, match="request '3' sample 0: vLLM returned no routes.*"
                                           "enable_return_routed_experts"):
        returned_routes([_request("3", [1, 2], [(0, ([4, 5], None))])])
    with pytest.raises(RuntimeError, match=r"request '4' sample 0: .*shape \(2, 2, 2\) for 3 "
                                           r"fed tokens"):
        returned_routes([_request("4", [1, 2], [(0, ([4, 5], np.zeros((2, 2, 2))))])])


@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 1), (1, 2), (1, 4)])
def test_expert_digests_of_all_ranks_add_up_to_each_tensors(tp, ep):
    """Each rank digests what it holds of every expert (`expert_place`): rows of a gate / up
    and the TP-summed down at infer TP, whole experts on their owner at inference EP (vLLM
    sets the experts' TP to 1 then, so `tp` is 1 at ep > 1); summed over ranks, each tensor's
    digest is that of the whole HF tensor, as the actor's side computes it."""
    experts, hidden, full = 4, 6, 8
    ranks, width = tp * ep, full // tp
    g = torch.Generator().manual_seed(0)
    gate = torch.randn(experts, full, hidden, generator=g)
    down = torch.randn(experts, hidden, full, generator=g)
    p, q = probe(hidden), probe(full)
    total = {}
    for rank in range(ranks):
        tp_rank = rank % tp
        owned = range(experts) if ep == 1 else range(rank * experts // ep,
                                                     (rank + 1) * experts // ep)
        rows = slice(tp_rank * width, (tp_rank + 1) * width)
        for e in range(experts):
            held = e in owned
            w1 = gate[e, rows] @ p if held else torch.zeros(width)
            # the down's partial products, all-reduced over the TP ranks
            w2 = sum(down[e][:, r * width:(r + 1) * width] @ q[r * width:(r + 1) * width]
                     for r in range(tp)) if held else torch.zeros(hidden)
            for shard, y in (("w1", w1), ("w2", w2)):
                shape, offset, counts = expert_place(shard, hidden, width, tp, tp_rank, held)
                assert shape == ((full, hidden) if shard == "w1" else (hidden, full))
                d = digest(y if counts else torch.zeros_like(y), offset, shape[0])
                total[e, shard] = total.get((e, shard), 0) + d
    for e in range(experts):
        assert torch.allclose(total[e, "w1"], digest(gate[e] @ p), rtol=1e-5)
        assert torch.allclose(total[e, "w2"], digest(down[e] @ q), rtol=1e-5)


def test_the_vllm_names_these_paths_use_exist_in_the_installed_vllm():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.outputs import CompletionOutput
    from vllm.sampling_params import SamplingParams

    args = {f.name for f in dataclasses.fields(EngineArgs)}
    assert {"enable_expert_parallel", "enable_return_routed_experts"} <= args
    assert "routed_experts" in {f.name for f in dataclasses.fields(CompletionOutput)}
    assert SamplingParams().routed_experts_prompt_start == 0     # routes from the first token
    assert isinstance(RoutedExperts.expert_map, property)
    assert {"use_ep", "ep_rank", "ep_size", "tp_size", "tp_rank"} <= {
        f.name for f in dataclasses.fields(FusedMoEParallelConfig)}
