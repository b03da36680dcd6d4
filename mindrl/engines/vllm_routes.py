"""A vLLM engine's MoE routes per token, captured inside its workers (the CPU build: vLLM 0.32
returns routes itself only with Model Runner V2, `enable_return_routed_experts`, which needs
Triton; docs/guides/routing-replay.md).

Each FusedMoE layer's router (`select_experts`, vLLM's modular kernels, the CPU one among
them) is wrapped to keep the top-k ids it returns, call after call. `engine_routes` teacher-
forces each finished sample (its prompt and response but the last token, which the engine
never routes) through the engine in one prefill of its own, prefix cache bypassed (a fresh
`cache_salt`), so the ids recorded are that sequence's tokens in order: the engine's kernel
and weights, routed in a prefill rather than at the decode step that sampled each token.
"""

from __future__ import annotations

import uuid
from typing import List, Sequence

import torch

UNKNOWN = -1


def _routers(worker):
    model = worker.model_runner.get_model()
    found = []
    for m in model.modules():
        router = getattr(m, "router", None)
        if hasattr(router, "select_experts") and all(router is not r for r in found):
            found.append(router)
    return found


def install_capture(worker) -> int:
    """Wrap every MoE router of this worker's model (once); returns how many."""
    routers = _routers(worker)
    for router in routers:
        if getattr(router, "_mindrl_routes", None) is not None:
            continue
        router._mindrl_routes = []
        select = router.select_experts

        def capture(*args, _select=select, _router=router, **kwargs):
            weights, ids = _select(*args, **kwargs)
            if _router._mindrl_routes is not None:
                _router._mindrl_routes.append(ids.detach().to("cpu", torch.long).clone())
            return weights, ids

        router.select_experts = capture
    return len(routers)


def take_routes(worker) -> List[torch.Tensor]:
    """Per MoE layer, the ids routed since the last take [tokens, K], in call order."""
    out = []
    for router in _routers(worker):
        calls, router._mindrl_routes = router._mindrl_routes or [], []
        out.append(torch.cat(calls) if calls else torch.empty(0, 0, dtype=torch.long))
    return out


def engine_routes(llm, prompts: Sequence[Sequence[int]],
                  responses: Sequence[Sequence[int]]) -> List[torch.Tensor]:
    """Per sample [len(prompt) + len(response), L, K] int: the engine's routes of each token,
    UNKNOWN at the last (never fed to the engine). One prefill per sample."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    if not llm.collective_rpc(install_capture)[0]:
        raise ValueError("the engine's model has no MoE layers to take routes from")
    llm.collective_rpc(take_routes)                     # drop what generate routed
    out = []
    for prompt, response in zip(prompts, responses):
        ids = list(map(int, prompt)) + list(map(int, response))
        fed = TokensPrompt(prompt_token_ids=ids[:-1], cache_salt=uuid.uuid4().hex)
        llm.generate([fed], SamplingParams(max_tokens=1), use_tqdm=False)
        layers = llm.collective_rpc(take_routes)[0]     # every TP rank routes every token
        routes = torch.stack([layer[:len(ids) - 1] for layer in layers], dim=1)
        last = torch.full((1, *routes.shape[1:]), UNKNOWN, dtype=torch.long)
        out.append(torch.cat([routes, last]))
    return out
