"""A one-rank Megatron engine that trains, padded or packed, as the update benches build it, and
the release of its device memory before the next one."""

from __future__ import annotations

from bench.common.batches import PACK_MICRO_BATCH


def pack_engine(spec, dtype: str, budget=None, lr=1e-6, distributed_optimizer=False,
                micro_batch_size=None, moe=None):
    """A trainable one-rank engine: padded rows of `micro_batch_size` (PACK_MICRO_BATCH)
    samples, or (`budget`) packed rows of at most that many real tokens; `moe`: a MoE
    model's MoETraining settings (None: the defaults)."""
    from mindrl.engines.megatron_engine import MegatronEngine, OptimConfig
    from mindrl.models.builder import Parallelism, initialize_parallel

    initialize_parallel(Parallelism())
    return MegatronEngine(spec, Parallelism(), params_dtype=dtype,
                          micro_batch_size=micro_batch_size or PACK_MICRO_BATCH,
                          packed=budget is not None,
                          max_tokens_per_micro_batch=budget, moe=moe,
                          optim=OptimConfig(lr=lr, clip_grad=0.0,
                                            use_distributed_optimizer=distributed_optimizer))


def release() -> None:
    """Hand a dropped engine's device memory back before the next one is built (its DDP hooks
    hold reference cycles that only the collector breaks)."""
    import gc

    from mindrl import device

    gc.collect()
    device.empty_cache()
