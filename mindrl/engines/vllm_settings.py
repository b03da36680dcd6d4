"""What vLLM is given: the run's settings (GenerateConfig, SamplingConfig) as vLLM's own
arguments (``LLM`` keyword arguments, ``SamplingParams``, token prompts with their images), and
the environment it reads at start-up. Pure translation, apart from the engine that uses it."""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

from mindrl import device
from mindrl.config.cpu_notice import cpu_vllm
from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.data.vl_prompts import decode_image


def configure_environment(cpu_threads: int) -> None:
    """What vLLM reads at start-up; the platform's own needs come from device.py."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"   # in-process: iterators, fast start
    device.prepare_vllm(cpu_threads)


def worker_start(cfg: GenerateConfig) -> str:
    """How vLLM started an engine's TP/PP workers: "in-process" for one worker, else the
    multiprocessing method it used (vLLM writes "spawn" into the environment where it forces
    it; on CPU MindRL keeps "fork": platforms/cpu/vllm_start.py)."""
    if cfg.infer_tensor_parallel_size * cfg.infer_pipeline_parallel_size == 1:
        return "in-process"
    return os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork")


def llm_kwargs(cfg: GenerateConfig, seed: int, logprobs_mode: str, build,
               actor_dtype: Optional[str] = None, routes: bool = False) -> dict:
    """GenerateConfig -> ``vllm.LLM`` keyword arguments, with what `build` (the platform's
    vLLM build, `device.vllm_build()`) needs; `actor_dtype`: what the run's actor computes in
    (vLLM's CPU build follows it: config/cpu_notice.py); `routes`: the run asks the engine
    for its MoE routes, which vLLM returns itself where the build can."""
    kw = dict(tensor_parallel_size=cfg.infer_tensor_parallel_size,
              pipeline_parallel_size=cfg.infer_pipeline_parallel_size,
              max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
              max_model_len=cfg.max_model_len, dtype=cfg.dtype, enforce_eager=cfg.enforce_eager,
              enable_prefix_caching=cfg.enable_prefix_caching,
              trust_remote_code=cfg.trust_remote_code, seed=seed, logprobs_mode=logprobs_mode)
    if cfg.block_size:
        kw["block_size"] = cfg.block_size
    if cfg.kv_cache_memory_bytes:
        kw["kv_cache_memory_bytes"] = cfg.kv_cache_memory_bytes
    if cfg.expert_parallel:
        if not build.abilities.expert_parallel:
            raise ValueError("generate_config.enable_expert_parallel / "
                             "infer_expert_parallel_size: this vLLM build cannot run expert "
                             "parallelism (vLLM's CPU MoE kernel crashes with it); set them to "
                             "false / 1 (experts then split over infer TP)")
        kw["enable_expert_parallel"] = True
    if routes and returned_routes(cfg, build):
        kw["enable_return_routed_experts"] = True
    if cfg.model_parallel_size > 1:
        # Workers in processes of their own beside this one (vLLM's mp executor): the one
        # that runs on every platform, CPU included (docs/platforms.md#the-cluster-path-on-cpu).
        kw["distributed_executor_backend"] = "mp"
    return build.engine_kwargs(kw, cfg, cpu_vllm(cfg.dtype, actor_dtype))


def returned_routes(cfg: GenerateConfig, build) -> bool:
    """Whether vLLM itself returns the routes (``enable_return_routed_experts``): the build
    can (platforms/vllm_abilities.py) and the engine has what vLLM needs for it, a prefix
    cache and one pipeline stage (config/checks/replay.py refuses the rest); otherwise the
    engine's workers capture them (engines/vllm_routes.py)."""
    return (build.abilities.returns_routes and cfg.enable_prefix_caching
            and cfg.infer_pipeline_parallel_size == 1)


def sampling_params(cfg: SamplingConfig, n: int, **overrides):
    """SamplingConfig (+ per-call overrides named like its fields) -> vllm.SamplingParams."""
    from vllm import SamplingParams

    names = {f.name for f in dataclasses.fields(SamplingConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown sampling override(s) {unknown}; known: {sorted(names)}")
    cfg = dataclasses.replace(cfg, **overrides)
    return SamplingParams(n=n, max_tokens=cfg.max_tokens, logprobs=max(cfg.logprobs, 0),
                          top_p=cfg.top_p, top_k=cfg.top_k, min_p=cfg.min_p,
                          temperature=cfg.temperature, seed=cfg.seed, detokenize=cfg.detokenize,
                          min_tokens=cfg.min_tokens, ignore_eos=cfg.ignore_eos,
                          stop_token_ids=list(cfg.stop_token_ids) or None)


PER_PROMPT = ("max_tokens", "min_tokens", "seed")   # overrides that may be one value per prompt


def per_prompt_params(params, prompts: int, n: int, limits: Dict[str, Sequence[int]]):
    """One SamplingParams per prompt: with a seed, prompt i's samples seed from seed + i*n
    (vLLM seeds sample j with seed + j, the same for every prompt); `limits` gives a value per
    prompt for any of PER_PROMPT (a partial rollout's continuations each have their own
    remaining budget, and one call batches them all)."""
    for name, values in limits.items():
        if name not in PER_PROMPT or len(values) != prompts:
            raise ValueError(f"{name}: {len(values)} values for {prompts} prompts (per-prompt "
                             f"values: {PER_PROMPT})")
    out = []
    for i in range(prompts):
        one = params.clone()
        if params.seed is not None:
            one.seed = params.seed + i * n
        for name, values in limits.items():
            setattr(one, name, int(values[i]))
        out.append(one)
    return out


def requests(prompt_token_ids: Sequence[Sequence[int]],
             images: Optional[Sequence[Sequence[bytes]]],
             mm_processor_kwargs: Optional[dict]) -> List[dict]:
    """vLLM token prompts; a prompt with images carries them decoded (vLLM takes images, not
    pixel values) and the processor settings both sides share."""
    if images is not None and len(images) != len(prompt_token_ids):
        raise ValueError(f"{len(images)} image lists for {len(prompt_token_ids)} prompts")
    out = []
    for index, ids in enumerate(prompt_token_ids):
        request = {"prompt_token_ids": list(map(int, ids))}
        if images is not None and images[index]:
            request["multi_modal_data"] = {"image": [decode_image(b) for b in images[index]]}
            if mm_processor_kwargs:
                request["mm_processor_kwargs"] = dict(mm_processor_kwargs)
        out.append(request)
    return out
