"""Rank body for the TP/PP logits tests: load one full Megatron state dict at several layouts."""

import torch

from mindrl.ckpt import mapping
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel
from mindrl.models.forward import gather_vocab_parallel, pipeline_forward


def logits_at_layouts(rank, world_size, spec, full_by_tp, tokens, layouts):
    """{(tp, pp): full-vocab logits} on the rank that ends each layout's pipeline (tp rank 0)."""
    from megatron.core import parallel_state as ps

    out = {}
    for tp, pp in layouts:
        parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        initialize_parallel(parallel)
        model = build_gpt_model(spec, parallel)
        local = mapping.stage_state_dict(
            full_by_tp[tp], spec, ps.get_tensor_model_parallel_rank(), tp,
            ps.get_pipeline_model_parallel_rank(), pp)
        missing, unexpected = model.load_state_dict(local, strict=False)
        assert not unexpected, unexpected
        assert all(k.endswith("_extra_state") for k in missing), missing
        model.eval()
        logits = pipeline_forward(model, tokens, micro_batch_size=2,
                                  on_output=lambda o, _: gather_vocab_parallel(o))
        if logits and ps.get_tensor_model_parallel_rank() == 0 and ps.get_data_parallel_rank() == 0:
            out[(tp, pp)] = torch.cat(logits)[:, :, : spec.vocab_size].clone()
        ps.destroy_model_parallel()
    return out
