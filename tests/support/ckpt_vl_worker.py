"""Rank bodies of the Qwen2.5-VL converter tests (spawned: Megatron stays out of pytest)."""

import torch


def vl_logits_from_checkpoint(rank, world_size, ckpt, sample, layouts):
    """{(tp, pp): full-vocab logits [1, S, V]} of `sample` (one prompt with its images) after
    load_mcore_checkpoint into a random-init Qwen25VLModel built from the checkpoint's own
    recorded HF config, at each layout."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt import mcore_io
    from mindrl.ckpt.convert_checks import vl_hf_config
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.families.qwen25_vl import build_qwen25_vl_model
    from mindrl.models.forward import gather_vocab_parallel
    from support.tiny_vl import megatron_schedule

    info = mcore_io.read_model_info(mcore_io.resolve_checkpoint_dir(ckpt))
    hf_config = vl_hf_config(info.extra["vision"]["hf_config"], ckpt)
    out = {}
    for tp, pp in layouts:
        parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        initialize_parallel(parallel, seed=1000 + tp * 10 + pp)   # random, not the weights
        # Divisor 4 pads the vocab rows beyond the checkpoint's: the loader bridges them.
        model = build_qwen25_vl_model(hf_config, parallel, make_vocab_size_divisible_by=4,
                                      vision_seed=1234).eval()
        mcore_io.load_mcore_checkpoint(model, ckpt)
        with torch.no_grad():
            logits = megatron_schedule(model, [sample], 1, True, lambda o, _: gather_vocab_parallel(o))
        if logits and ps.get_tensor_model_parallel_rank() == 0 and \
                ps.get_data_parallel_rank() == 0:
            out[(tp, pp)] = torch.cat(logits)[..., :info.spec.vocab_size].clone()
        ps.destroy_model_parallel()
    return out
