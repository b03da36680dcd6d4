"""Rank body of tests/rollout/test_vision_rollout.py: the actor's first log-prob pass over a
rolled-out Qwen2.5-VL Batch (one rank, TP1), from the HF directory vLLM ran."""


def actor_log_probs(rank, world_size, model_dir, batches):
    """compute_log_probs of each Batch with the model of `model_dir` (transformers weights
    loaded into the Megatron family)."""
    from megatron.core import parallel_state as ps
    from transformers import Qwen2_5_VLForConditionalGeneration

    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.families.qwen25_vl import build_qwen25_vl_model, text_spec
    from support.mcore_load import load_hf_state_dict

    hf = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir)
    parallel = Parallelism()
    initialize_parallel(parallel)
    engine = MegatronEngine(text_spec(hf.config), parallel, micro_batch_size=2,
                            pad_id=batches[0].pad_id,
                            build_model=lambda s, p, d: build_qwen25_vl_model(hf.config, p, d))
    load_hf_state_dict(engine.module, hf.state_dict())
    out = [engine.compute_log_probs(b)["log_probs"] for b in batches]
    ps.destroy_model_parallel()
    return out
