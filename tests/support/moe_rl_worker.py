"""Rank body for the MoE RL-settings tests: one GRPO step of tiny Qwen3-MoE in the Megatron
engine with given MoE settings (run under mindrl.distributed.spawn_local)."""

from mindrl.config.model_spec import load_model_spec
from mindrl.config.roles import LossConfig, MoETraining, OptimConfig
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import MegatronEngine
from mindrl.models.builder import Parallelism, initialize_parallel

from support.engine_batch import make_batch


def one_step(rank, world, moe: MoETraining, tp=1, micro_batch_size=2):
    """{"before"/"after": {name: tensor}, "metrics", "trainable": names the optimizer holds,
    "router_dtype": the routers' TransformerConfig dtype} on rank 0."""
    from megatron.core import parallel_state as ps

    spec = load_model_spec("tiny-qwen3-moe")
    parallel = Parallelism(tensor_model_parallel_size=tp, sequence_parallel=tp > 1)
    initialize_parallel(parallel, seed=7)
    engine = MegatronEngine(spec, parallel, micro_batch_size=micro_batch_size,
                            loss=LossConfig(clip_ratio=0.2), seed=7, moe=moe,
                            optim=OptimConfig(lr=1e-2, clip_grad=0.0,
                                              use_distributed_optimizer=False))
    before = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    batch = make_batch(spec.vocab_size)
    metrics = engine.update(Batch.of(**batch), mini_batch_size=len(batch["prompt_ids"]))
    after = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    trainable = sorted(n for n, p in engine.module.named_parameters() if p.requires_grad)
    config = engine.module.config
    ps.destroy_model_parallel()
    if rank:
        return None
    return dict(before=before, after=after, metrics=metrics, trainable=trainable,
                router_dtype=config.moe_router_dtype, aux_coeff=config.moe_aux_loss_coeff)


def metrics_at_layout(rank, world, spec, full_by_tp, batch, tp, pp, moe: MoETraining,
                      max_tokens=11):
    """One update's metrics (rank 0) at TP x PP (sequence parallel at TP > 1) from the same
    full weights, packed micro batches of at most `max_tokens` tokens (11: several per DP
    rank; None: padded rows of 2 samples)."""
    return metrics_at_layouts(rank, world, spec, full_by_tp, batch, tp, pp,
                              [(moe, max_tokens)])[0]


def metrics_at_layouts(rank, world, spec, full_by_tp, batch, tp, pp, runs):
    """metrics_at_layout for each (moe, max_tokens) of `runs`, one process (rank 0's list)."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt import mapping

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                           sequence_parallel=tp > 1)
    out = []
    for moe, max_tokens in runs:
        initialize_parallel(parallel, seed=7)
        engine = MegatronEngine(spec, parallel, loss=LossConfig(clip_ratio=0.2), seed=7,
                                moe=moe, packed=max_tokens is not None, micro_batch_size=2,
                                max_tokens_per_micro_batch=max_tokens,
                                optim=OptimConfig(lr=1e-3, clip_grad=0.0,
                                                  use_distributed_optimizer=False))
        local = mapping.stage_state_dict(full_by_tp[tp], spec,
                                         ps.get_tensor_model_parallel_rank(), tp,
                                         ps.get_pipeline_model_parallel_rank(), pp)
        engine.module.load_state_dict(local, strict=False)
        engine.optimizer.reload_model_params()
        out.append(engine.update(Batch.of(**batch), mini_batch_size=len(batch["prompt_ids"])))
        ps.destroy_model_parallel()
    return out if rank == 0 else None
