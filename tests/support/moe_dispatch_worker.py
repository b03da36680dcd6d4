"""Rank body for the MoE dispatcher test: one full Megatron state dict at several layouts and
token dispatchers (Megatron's allgather and alltoall), forward only."""

import torch

from mindrl.ckpt import mapping
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel
from mindrl.models.forward import gather_vocab_parallel, pipeline_forward


def logits_by_dispatcher(rank, world_size, spec, full_by_tp, tokens, layouts):
    """{(tp, sequence_parallel, dispatcher): full-vocab logits} from TP rank 0."""
    from megatron.core import parallel_state as ps

    out = {}
    for tp, sp, dispatcher in layouts:
        parallel = Parallelism(tensor_model_parallel_size=tp, sequence_parallel=sp)
        initialize_parallel(parallel)
        model = build_gpt_model(spec, parallel, moe_token_dispatcher_type=dispatcher)
        local = mapping.stage_state_dict(full_by_tp[tp], spec,
                                         ps.get_tensor_model_parallel_rank(), tp, 0, 1)
        missing, unexpected = model.load_state_dict(local, strict=False)
        assert not unexpected and all(k.endswith("_extra_state") for k in missing), missing
        model.eval()
        logits = pipeline_forward(model, tokens, micro_batch_size=2,
                                  on_output=lambda o, _: gather_vocab_parallel(o))
        if ps.get_tensor_model_parallel_rank() == 0 and ps.get_data_parallel_rank() == 0:
            out[(tp, sp, dispatcher)] = torch.cat(logits)[:, :, : spec.vocab_size].clone()
        ps.destroy_model_parallel()
    return out
