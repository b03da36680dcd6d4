"""A vLLM engine's MoE routes per token: returned by vLLM itself where the build can
(`returned_routes`: vLLM 0.32's ``enable_return_routed_experts``, Model Runner V2 on CUDA;
platforms/vllm_abilities.py), otherwise captured inside its workers (the CPU build and
vllm-ascend: Model Runner V2 needs Triton; docs/guides/routing-replay.md).

Each FusedMoE layer's router (`select_experts`, vLLM's modular kernels, the CPU one among
them) is wrapped to keep the top-k ids it returns, call after call. Two ways to give them to
samples:

- in generate (`generate_with_routes`): the model runner's `execute_model` is wrapped too, and
  while recording, each step keeps the rows its routers returned beside the step's layout:
  vLLM V1's runner lays a step's tokens out in `input_batch.req_ids` order, each request's
  `num_scheduled_tokens` in a row, at the positions in `runner.positions`. Each request's
  routes are then those of its prompt (prefill steps, chunked or not) and of every response
  token but the last (decode steps): what the forward that produced each token routed.
- in a prefill per sample (`engine_routes`): each finished sample (prompt and response but
  the last token) is teacher-forced through the engine in a prefill of its own, prefix cache
  bypassed (a fresh `cache_salt`). One `llm.generate` per sample: the reference the in-
  generate capture is tested against, and the fallback for samples whose prompt was served
  from a prefix cache filled by an earlier call.
"""

from __future__ import annotations

import re
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

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


def _drain(routers) -> List[torch.Tensor]:
    out = []
    for router in routers:
        calls, router._mindrl_routes = router._mindrl_routes or [], []
        out.append(torch.cat(calls) if calls else torch.empty(0, 0, dtype=torch.long))
    return out


def take_routes(worker) -> List[torch.Tensor]:
    """Per MoE layer, the ids routed since the last take [tokens, K], in call order."""
    return _drain(_routers(worker))


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


# ------------------------------------------------------------ returned by vLLM

def returned_routes(results) -> List[List[torch.Tensor]]:
    """Per RequestOutput, per sample (by `CompletionOutput.index`), [P + R, L, K] long from
    vLLM's own ``CompletionOutput.routed_experts`` ([P + R - 1, L, K]: every token the engine
    fed, the prompt from its first token, ``routed_experts_prompt_start`` 0), UNKNOWN at the
    last token, as the capture gives them. A sample without routes, or with rows for another
    number of tokens, is refused naming its request (the engine was started without
    ``enable_return_routed_experts``, or vLLM's layout changed)."""
    out = []
    for result in results:
        prompt = len(result.prompt_token_ids)
        per_sample = []
        for sample in sorted(result.outputs, key=lambda o: o.index):
            fed = prompt + len(sample.token_ids) - 1
            rows = sample.routed_experts
            if rows is None:
                raise RuntimeError(f"request {result.request_id!r} sample {sample.index}: vLLM "
                                   f"returned no routes (the engine needs "
                                   f"enable_return_routed_experts)")
            rows = torch.as_tensor(rows).to(torch.long)
            if rows.dim() != 3 or rows.shape[0] != fed:
                raise RuntimeError(f"request {result.request_id!r} sample {sample.index}: vLLM "
                                   f"returned routes of shape {tuple(rows.shape)} for {fed} "
                                   f"fed tokens ([tokens, layers, top-k] expected)")
            last = torch.full((1, *rows.shape[1:]), UNKNOWN, dtype=torch.long)
            per_sample.append(torch.cat([rows, last]))
        out.append(per_sample)
    return out


# --------------------------------------------------------------- in generate

def _take_step(routers) -> torch.Tensor:
    """The rows every MoE layer routed since the last take, [tokens, L, K]."""
    return torch.stack(_drain(routers), dim=1)


def step_layout(runner, scheduler_output) -> Tuple[List[str], List[int], torch.Tensor]:
    """The token rows of the step just run: request ids in row order, tokens each, and every
    row's position (vLLM V1's GPU/CPU model runner, `execute_model` -> `_prepare_inputs`)."""
    if getattr(runner, "uses_mrope", False) or getattr(runner, "uses_xdrope_dim", 0):
        raise RuntimeError("routes in generate: this model's positions are not one per token "
                           "(M-RoPE); use the prefill capture (vllm_routes.engine_routes)")
    req_ids = list(runner.input_batch.req_ids)
    counts = [int(scheduler_output.num_scheduled_tokens[r]) for r in req_ids]
    total = int(scheduler_output.total_num_scheduled_tokens)
    if sum(counts) != total:
        raise RuntimeError(f"routes in generate: the runner's batch ({sum(counts)} tokens) "
                           f"is not the step's {total}; the runner's layout changed")
    return req_ids, counts, runner.positions[:total].to("cpu", torch.long).clone()


def install_step_log(worker) -> int:
    """Wrap this worker's model runner's `execute_model` (once) so that, while recording,
    each step's routed rows are kept with the step's layout; returns how many MoE layers."""
    layers = install_capture(worker)
    runner = worker.model_runner
    if getattr(runner, "_mindrl_steps", False) is not False:
        return layers
    runner._mindrl_steps = None                       # None: not recording
    execute, routers = runner.execute_model, _routers(worker)

    def logged(scheduler_output, *args, _execute=execute, _runner=runner, **kwargs):
        if _runner._mindrl_steps is None or not scheduler_output.total_num_scheduled_tokens:
            return _execute(scheduler_output, *args, **kwargs)
        _take_step(routers)                           # rows routed outside a step: not ours
        for new in scheduler_output.scheduled_new_reqs:
            _runner._mindrl_prompts[new.req_id] = new.prompt_token_ids
        out = _execute(scheduler_output, *args, **kwargs)
        req_ids, counts, positions = step_layout(_runner, scheduler_output)
        rows = _take_step(routers)
        if rows.shape[0] < positions.shape[0]:
            raise RuntimeError(f"routes in generate: the step routed {rows.shape[0]} rows "
                               f"for {positions.shape[0]} tokens")
        _runner._mindrl_steps.append((req_ids, counts, positions, rows[:positions.shape[0]]))
        return out

    runner.execute_model = logged
    return layers


def start_recording(worker) -> None:
    runner = worker.model_runner
    runner._mindrl_steps, runner._mindrl_prompts = [], {}


def stop_recording(worker) -> Dict[str, Tuple[Optional[List[int]], torch.Tensor]]:
    """Per engine request id: (its prompt ids, its routes by position [N, L, K], UNKNOWN
    where this call never routed a position). Recording stops."""
    runner = worker.model_runner
    steps, prompts = runner._mindrl_steps or [], runner._mindrl_prompts
    runner._mindrl_steps, runner._mindrl_prompts = None, {}
    if not steps:
        return {}
    names = sorted({r for req_ids, _, _, _ in steps for r in req_ids})
    number = {r: i for i, r in enumerate(names)}
    owner = torch.cat([torch.tensor([number[r] for r in req_ids], dtype=torch.long)
                       .repeat_interleave(torch.tensor(counts)) for req_ids, counts, _, _ in steps])
    positions = torch.cat([p for _, _, p, _ in steps])
    rows = torch.cat([r for _, _, _, r in steps])
    # Rows by (request, position), step order kept among equals: the last of each pair is
    # the latest (a preempted request's recomputed tokens keep the recompute's routes).
    key = owner * (int(positions.max()) + 1) + positions
    key, order = torch.sort(key, stable=True)
    last = torch.ones_like(key, dtype=torch.bool)
    last[:-1] = key[1:] != key[:-1]
    order = order[last]
    counts = torch.bincount(owner[order], minlength=len(names)).tolist()
    out = {}
    for name, mine in zip(names, torch.split(order, counts)):
        at = positions[mine]
        routes = torch.full((int(at[-1]) + 1, *rows.shape[1:]), UNKNOWN, dtype=torch.long)
        routes[at] = rows[mine]
        out[name] = (prompts.get(name), routes)
    return out


# vLLM's engine id of a request: the caller's id (`{index}_{parent}` for sample `index` of a
# request with n > 1, vllm/v1/engine/parallel_sampling.py), then "-" and 16 random hex digits
# (input_processor.assign_request_id) unless VLLM_DISABLE_REQUEST_ID_RANDOMIZATION.
_RANDOM_SUFFIX = re.compile(r"^(.*)-[0-9a-f]{8,16}$")


def external_id(engine_id: str, known: set) -> str:
    if engine_id in known:
        return engine_id
    match = _RANDOM_SUFFIX.match(engine_id)
    return match.group(1) if match else engine_id


def sample_request_id(request_id: str, index: int, n: int) -> str:
    return f"{index}_{request_id}" if n > 1 else request_id


def _fill_from_donors(routes: torch.Tensor, prompt: Sequence[int],
                      donors: List[Tuple[Sequence[int], torch.Tensor]]) -> torch.Tensor:
    """Prompt positions this request never routed (prefix-cache hits) from a request of the
    same call whose prompt shares the prefix up to them: the routes that filled that cache."""
    missing = (routes[:len(prompt)] == UNKNOWN).all(-1).all(-1).nonzero().flatten()
    for position in missing.tolist():
        for other_prompt, other in donors:
            if (other_prompt is not None and len(other_prompt) > position
                    and list(other_prompt[:position + 1]) == list(prompt[:position + 1])
                    and other.shape[0] > position and (other[position] != UNKNOWN).all()):
                routes[position] = other[position]
                break
    return routes


def generate_with_routes(llm, prompts, params) -> Tuple[list, List[List[torch.Tensor]]]:
    """`llm.generate(prompts, params)` with every sample's routes captured in the generate
    itself: per RequestOutput, per sample (by `CompletionOutput.index`) [P + R, L, K] long,
    UNKNOWN at the last token. Samples whose prompt tokens were served from a prefix cache
    that an earlier call filled are re-captured in a prefill of their own (`engine_routes`)."""
    if not llm.collective_rpc(install_step_log)[0]:
        raise ValueError("the engine's model has no MoE layers to take routes from")
    llm.collective_rpc(start_recording)
    try:
        results = llm.generate(prompts, params, use_tqdm=False)
    finally:
        logged = llm.collective_rpc(stop_recording)[0]     # every TP rank routes every token
    known = set()
    for result in results:
        n = len(result.outputs)
        known.update(sample_request_id(result.request_id, o.index, n) for o in result.outputs)
    by_id = {external_id(name, known): entry for name, entry in logged.items()}
    donors = list(by_id.values())
    out, redo = [], []
    for r, result in enumerate(results):
        prompt = list(map(int, result.prompt_token_ids))
        per_sample = []
        for sample in sorted(result.outputs, key=lambda o: o.index):
            name = sample_request_id(result.request_id, sample.index, len(result.outputs))
            if name not in by_id:
                raise RuntimeError(f"routes in generate: no step routed request {name!r} "
                                   f"(engine ids {sorted(logged)[:4]}...); vLLM's request "
                                   f"naming changed")
            seen_prompt, routes = by_id[name]
            if seen_prompt is not None and list(seen_prompt) != prompt:
                raise RuntimeError(f"routes in generate: request {name!r} routed another "
                                   f"prompt than RequestOutput {result.request_id!r} holds")
            length = len(prompt) + len(sample.token_ids)
            fed = torch.full((length, *routes.shape[1:]), UNKNOWN, dtype=torch.long)
            fed[:min(length - 1, routes.shape[0])] = routes[:length - 1]
            if (fed[:length - 1] == UNKNOWN).any():
                fed = _fill_from_donors(fed, prompt, donors)
            if (fed[:length - 1] == UNKNOWN).any():
                redo.append((r, len(per_sample), prompt, list(sample.token_ids)))
            per_sample.append(fed)
        out.append(per_sample)
    if redo:
        again = engine_routes(llm, [p for _, _, p, _ in redo], [t for _, _, _, t in redo])
        for (r, s, _, _), routes in zip(redo, again):
            out[r][s] = routes
    return results, out
