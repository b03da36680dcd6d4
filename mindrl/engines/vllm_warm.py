"""What every rollout engine would otherwise compile at its first sampled log-prob, done once
in a process that engines fork from (platforms/preload/kinds.py WARM_UPS).

vLLM's sampler ranks each sampled token (the vocabulary entries scoring above it) with a
torch.compile'd helper, `batched_count_greater_than`: about 1.5 CPU-s in every engine, plus
inductor's probes of the machine's vector instruction sets (4 processes, about 1.2 CPU-s).
Compiled here at two vocabulary sizes, dynamo makes the vocabulary dimension dynamic too, so
a fork's first call reuses the graph whatever its model's vocabulary (measured: 1.5 CPU-s ->
0.08). The helper is an exact integer count: compiled once or per engine, it counts the same.
"""


def compile_sampler_helpers() -> None:
    import torch
    from vllm.v1.sample.ops.logprobs import batched_count_greater_than

    with torch.inference_mode():       # tensors made as vLLM's model runner makes them
        for vocab in (128, 160):
            logprobs = torch.zeros(2, vocab)
            sampled = logprobs.gather(-1, torch.zeros(2, 1, dtype=torch.int64))
            # the sampler's own marks: the batch dimension never specialises
            torch._dynamo.decorators.mark_unbacked(logprobs, 0)
            torch._dynamo.decorators.mark_unbacked(sampled, 0)
            batched_count_greater_than(logprobs, sampled)


def register_kernel_overrides() -> None:
    """vLLM's CPU platform swaps its Triton kernels for C++ fallbacks in every worker's
    constructor (`register_triton_kernel_overrides`): a scan of every loaded module's names,
    0.3-0.65 CPU-s an engine, and a second call in the same process wraps the wrappers. Made
    here once, before the forks: they inherit the swapped kernels (a module a fork imports
    later reads the swapped attribute), and the platform's method then does nothing."""
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    type(current_platform).register_triton_kernel_overrides = classmethod(_registered)


def _registered(cls) -> None:
    """The overrides are in place already (register_kernel_overrides)."""
