"""Rank body for the TP/PP logits tests: load one full Megatron state dict at several layouts."""

import torch

from mindrl.ckpt import mapping
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel
from mindrl.models.forward import gather_vocab_parallel, pipeline_forward
from mindrl.weight_sync.plan import plan_units


def logits_at_layouts(rank, world_size, spec, full_by_tp, tokens, layouts):
    """{layout: full-vocab logits} on the rank that ends each layout's pipeline (tp rank 0).
    A layout is (tp, pp) or (tp, pp, first stage's layers, last stage's layers) for an
    uneven pipeline; each stage's weights come from the checkpoint tables' split, and the
    weight sync's plan must name this stage's tensors as the built model does."""
    from megatron.core import parallel_state as ps

    out = {}
    for layout in layouts:
        tp, pp, first, last = (*layout, None, None)[:4]
        parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                               first_stage_layers=first, last_stage_layers=last)
        initialize_parallel(parallel)
        model = build_gpt_model(spec, parallel)
        pp_rank = ps.get_pipeline_model_parallel_rank()
        local = mapping.stage_state_dict(
            full_by_tp[tp], spec, ps.get_tensor_model_parallel_rank(), tp, pp_rank, pp,
            first_stage_layers=first, last_stage_layers=last)
        missing, unexpected = model.load_state_dict(local, strict=False)
        assert not unexpected, unexpected
        assert all(k.endswith("_extra_state") for k in missing), missing
        planned = {u.local_name for u in plan_units(spec, pp, first, last) if u.stage == pp_rank}
        assert planned <= set(local), sorted(planned - set(local))
        model.eval()
        logits = pipeline_forward(model, tokens, micro_batch_size=2,
                                  on_output=lambda o, _: gather_vocab_parallel(o))
        if logits and ps.get_tensor_model_parallel_rank() == 0 and ps.get_data_parallel_rank() == 0:
            out[layout] = torch.cat(logits)[:, :, : spec.vocab_size].clone()
        ps.destroy_model_parallel()
    return out
