"""Rank bodies for the reward-model tests (spawned: Megatron stays out of the pytest process)."""

import dataclasses


def convert(rank, world, hf_dir, mg_dir, back_dir):
    """HF sequence-classification dir -> mcore -> HF, with the project's converter."""
    from mindrl.ckpt import converter

    converter.hf_to_mcore(hf_dir, mg_dir, progress=False, tp=2, pp=2, model_type_hf="qwen2",
                          add_qkv_bias=True)
    converter.mcore_to_hf(mg_dir, back_dir, progress=False)


def scores_at_layouts(rank, world, ckpt, batch, layouts):
    """{(tp, pp, sequence_parallel[, token budget: packed]): scores [B]} from MegatronEngine.compute_scores after loading the checkpoint;
    plus the error of loading the reward checkpoint into a vocab-head model."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt import mcore_io
    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel
    from support.mcore_load import load_error

    spec = mcore_io.read_model_info(mcore_io.resolve_checkpoint_dir(ckpt)).spec
    out = {}
    for layout in layouts:
        tp, pp, sp, budget = (*layout, None)[:4]
        parallel = Parallelism(tp, pp, sequence_parallel=sp)
        initialize_parallel(parallel, seed=1000 + tp * 10 + pp)   # random, not the weights
        engine = MegatronEngine(spec, parallel, micro_batch_size=3,   # 4 samples: padded
                                packed=budget is not None, max_tokens_per_micro_batch=budget)
        mcore_io.load_mcore_checkpoint(engine.module, ckpt)
        scores = engine.compute_scores(Batch.of(**batch))
        if rank == 0:
            out[layout] = scores
        ps.destroy_model_parallel()
    out["lm_error"] = load_error(dataclasses.replace(spec, head="lm"), ckpt)
    return out
