"""Rank body of test_megatron_engine_vl.py: the engine's own passes on a Qwen2.5-VL batch."""

import torch

RESPONSE = 4          # each sample's last 4 tokens are its response


def vl_batch(samples, pad_id=0):
    """The data contract's padded form with per-sample images: prompts left-padded, responses
    right-padded (sample 0's last token masked as padding after EOS would be)."""
    prompts = [s["input_ids"][:-RESPONSE] for s in samples]
    width = max(len(p) for p in prompts)
    prompt_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    for b, p in enumerate(prompts):
        prompt_ids[b, width - len(p):] = p
        prompt_mask[b, width - len(p):] = 1
    response_ids = torch.stack([s["input_ids"][-RESPONSE:] for s in samples])
    response_mask = torch.ones_like(response_ids)
    response_mask[0, -1] = 0
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            "response_ids": response_ids, "response_mask": response_mask,
            "pixel_values": [s["pixel_values"] for s in samples],
            "image_grid_thw": [s["image_grid_thw"] for s in samples]}


def run_engine(rank, world_size, hf_config, hf_state, batch, layouts):
    """Per layout (tp, pp[, token budget: packed rows, sequence parallel at TP > 1]): log-probs before and after one GRPO update, the update's metrics,
    how far the vision tower moved (first stage), and the samples' rows in `batch`. Where the
    layout leaves a data-parallel group (tp * pp < world size), the batch's rows are repeated
    up to a multiple of DP (sample 1 again), so every DP rank holds other samples' images."""
    from megatron.core import parallel_state as ps

    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.families.qwen25_vl import build_qwen25_vl_model, text_spec
    from support.mcore_load import load_hf_state_dict

    out = {}
    for layout in layouts:
        tp, pp, budget = (*layout, None)[:3]
        parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                               sequence_parallel=budget is not None and tp > 1)
        initialize_parallel(parallel)
        spec = text_spec(hf_config, make_vocab_size_divisible_by=4)
        engine = MegatronEngine(
            spec, parallel, micro_batch_size=1, optim=OptimConfig(lr=1e-3, train_iters=1),
            loss=LossConfig(clip_ratio=0.2), packed=budget is not None,
            max_tokens_per_micro_batch=budget, build_model=lambda s, p, d: build_qwen25_vl_model(
                hf_config, p, d, make_vocab_size_divisible_by=4))
        load_hf_state_dict(engine.module, hf_state)
        vision = {n: p.detach().clone() for n, p in engine.module.named_parameters()
                  if n.startswith("visual.")}
        rows = [0, 1, 2] + [1] * (-3 % (world_size // (tp * pp)))
        samples = Batch.of(**batch).select(rows)
        before = engine.compute_log_probs(samples)["log_probs"]
        advantages = torch.tensor([1.0, -0.5, 2.0])[rows].unsqueeze(1).expand(-1, RESPONSE)
        trained = samples.select(range(len(rows))).add(advantages=advantages.contiguous())
        metrics = engine.update(trained, mini_batch_size=len(rows))
        after = engine.compute_log_probs(samples)["log_probs"]
        moved = max(((p.detach() - vision[n]).abs().max().item()
                     for n, p in engine.module.named_parameters() if n in vision), default=None)
        out[layout] = {"before": before, "after": after, "metrics": metrics,
                         "vision_moved": moved, "rows": rows}
        ps.destroy_model_parallel()
    return out
