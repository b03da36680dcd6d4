"""Rank bodies for the converter tests (spawned: Megatron stays out of the pytest process)."""

import dataclasses

import torch


def run_conversions(rank, world_size, jobs):
    """Run ("hf2mg" | "mg2hf", kwargs) jobs one after another in this one-process world."""
    from mindrl.ckpt import converter

    for kind, kwargs in jobs:
        fn = converter.hf_to_mcore if kind == "hf2mg" else converter.mcore_to_hf
        fn(progress=False, **kwargs)
    return len(jobs)


def logits_from_checkpoints(rank, world_size, cases, tokens, wrong_shape_ckpt=None,
                            resave=None):
    """{(case, tp, pp): full-vocab logits} after load_mcore_checkpoint at each layout.

    cases: (name, checkpoint root, make_vocab_size_divisible_by of the loading model, layouts).
    A different divisor than the converter's makes the loader bridge vocab padding.
    resave: (case, tp, pp, root): save the model loaded at that layout with
    save_mcore_checkpoint, as the trainer would (iteration 7).
    """
    from megatron.core import parallel_state as ps

    from mindrl.ckpt import mcore_io
    from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel
    from mindrl.models.forward import gather_vocab_parallel, pipeline_forward
    from support.mcore_load import load_error

    out = {}
    for name, ckpt, divisible, layouts in cases:
        info = mcore_io.read_model_info(mcore_io.resolve_checkpoint_dir(ckpt))
        spec = dataclasses.replace(info.spec, make_vocab_size_divisible_by=divisible)
        for tp, pp in layouts:
            parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
            initialize_parallel(parallel, seed=1000 + tp * 10 + pp)  # random, not the weights
            model = build_gpt_model(spec, parallel)
            mcore_io.load_mcore_checkpoint(model, ckpt)
            model.eval()
            logits = pipeline_forward(model, tokens, micro_batch_size=2,
                                      on_output=lambda o, _: gather_vocab_parallel(o))
            if logits and ps.get_tensor_model_parallel_rank() == 0 and \
                    ps.get_data_parallel_rank() == 0:
                full = torch.cat(logits)
                out[(name, tp, pp)] = (full[:, :, : spec.vocab_size].clone(),
                                       full[:, :, spec.vocab_size:].abs().max().item()
                                       if full.shape[-1] > spec.vocab_size else 0.0)
            if resave is not None and resave[:3] == (name, tp, pp):
                mcore_io.save_mcore_checkpoint(model, resave[3], spec, "fp32", iteration=7,
                                               hf_assets=info.extra["source"]["hf_dir"])
            ps.destroy_model_parallel()
    if wrong_shape_ckpt is not None:  # a model of another shape gets a clear error
        info = mcore_io.read_model_info(mcore_io.resolve_checkpoint_dir(wrong_shape_ckpt))
        spec = dataclasses.replace(info.spec, ffn_hidden_size=2 * info.spec.ffn_hidden_size)
        out["wrong_shape_error"] = load_error(spec, wrong_shape_ckpt)
    return out
