"""A MoE update against a dense model of equal active parameters, measured in the same run.

    python bench/bench_moe.py                              # qwen3-moe-bench shape, fp32
    python bench/bench_moe.py --model tiny-qwen3-moe --samples 8 --response 32   # smoke
    python bench/bench_moe.py --hidden 512 --expert-width 512     # the same model, wider

The dense baseline is the MoE spec with its expert MLPs replaced by one dense SwiGLU of width
router_topk x the expert width (architecture qwen3): per token it does the same matmuls as the
MoE layer's top-k experts, so the two differ by the router (hidden x experts per layer, reported
as `router_parameters`) and by what MoE costs beyond its FLOPs: routing, the token dispatch,
experts on uneven token counts. The MoE update runs with its experts one by one (Megatron's
SequentialMLP) and, where the device has torch's grouped GEMM in the dtype, grouped (two grouped
GEMMs per layer, models/grouped_experts.py): `grouped_ratio` = grouped tokens/s over one by
one; `moe_*` are the keys of what `moe_grouped_gemm: null` runs here (`expert_kernel`).

Per model: one rank builds the Megatron engine (packed rows, a token budget of 4 x the longest
sample; bench/common/update_engine.py), runs a warm-up update, then `--repeats` updates of the
same natural-length batch (forward, backward, optimizer step); tokens/s = real tokens / the
median update's seconds. `update_ratio` = MoE tokens/s over dense tokens/s.

The sync's actor side: every weight as the rollout engine receives it (vLLM's names; the
experts fused as its MoE layer loads them), built by the weight sync's own source
(weight_sync/source.MegatronShards.hf_parts) and copied into a bucket, in seconds per GB of
weights sent (median of `--repeats`); `sync_ratio` = MoE over dense. vLLM's load of the bucket
(for MoE on CPU, repacking every expert layer) is not in it: bench_reshard.py measures a sync
end to end. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.batches import natural_batch, pack_layout  # noqa: E402
from bench.common.results import add_results_argument, emit  # noqa: E402
from bench.common.update_engine import pack_engine, release  # noqa: E402


def dense_twin(spec):
    """The dense Qwen3 of equal active parameters: each MoE layer's top-k experts as one
    SwiGLU of width top-k x expert width (dense layers keep theirs only when every layer is
    MoE-or-dense alike: the twin gives every layer the active width)."""
    return dataclasses.replace(spec, name=spec.name + "-dense-twin", architecture="qwen3",
                               ffn_hidden_size=spec.moe.router_topk * spec.moe.ffn_hidden_size,
                               moe=None)


def router_parameters(spec) -> int:
    return spec.hidden_size * spec.moe.num_experts * len(
        [i for i in range(spec.num_layers) if spec.moe.is_moe_layer(i)])


def time_updates(spec, batch, budget: int, dtype: str, repeats: int, moe=None) -> list:
    from mindrl import device

    engine = pack_engine(spec, dtype, budget, moe=moe)
    engine.update(batch, mini_batch_size=len(batch))        # warm-up
    seconds = []
    for _ in range(repeats):
        device.synchronize()
        start = time.perf_counter()
        engine.update(batch, mini_batch_size=len(batch))
        device.synchronize()
        seconds.append(time.perf_counter() - start)
    sync = time_sync_source(engine, spec, repeats)
    del engine
    release()
    return seconds, sync


def time_sync_source(engine, spec, repeats: int) -> dict:
    """Seconds per GB for the actor side of a weight sync (vLLM-named tensors into a bucket)."""
    import torch

    from mindrl.weight_sync.source import MegatronShards

    source = MegatronShards(engine.model, spec)
    seconds, nbytes = [], 0
    for _ in range(repeats):
        start, nbytes = time.perf_counter(), 0
        for unit in source.units:
            for tensor in source.hf_parts(unit).values():
                bucket = torch.empty_like(tensor)
                bucket.copy_(tensor)
                nbytes += tensor.numel() * tensor.element_size()
        seconds.append(time.perf_counter() - start)
    return {"bytes": nbytes, "s_per_gb": statistics.median(seconds) / (nbytes / 1e9)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-qwen3-moe")
    ap.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, help="the model's hidden size instead of its own")
    ap.add_argument("--expert-width", type=int, help="each expert's width instead of its own")
    add_results_argument(ap)
    args = ap.parse_args(argv)

    from mindrl import device
    from mindrl.config.model_spec import load_model_spec
    from mindrl.data.batch import Batch

    device.init_distributed(0, 1)
    spec = load_model_spec(args.model)
    if not spec.is_moe:
        raise SystemExit(f"--model {args.model} has no experts: name a MoE model "
                         f"(e.g. tiny-qwen3-moe)")
    spec = dataclasses.replace(spec, max_position_embeddings=max(
        spec.max_position_embeddings, args.prompt + args.response))
    if args.hidden or args.expert_width:    # the same model at another width
        spec = dataclasses.replace(
            spec, name=f"{spec.name}-h{args.hidden or spec.hidden_size}"
                       f"-e{args.expert_width or spec.moe.ffn_hidden_size}",
            hidden_size=args.hidden or spec.hidden_size,
            moe=dataclasses.replace(spec.moe, ffn_hidden_size=args.expert_width
                                    or spec.moe.ffn_hidden_size))
    dense = dense_twin(spec)
    b = natural_batch(spec.vocab_size, args.samples, args.prompt, args.response, seed=7)
    layout = pack_layout(b)
    batch = Batch.of(**b)
    out = {"bench": "moe", "model": spec.name, "dtype": args.dtype, "samples": args.samples,
           "real_tokens": layout["real_tokens"],
           "active_parameters": spec.num_parameters(active=True),
           "total_parameters": spec.num_parameters(),
           "dense_parameters": dense.num_parameters(),
           "router_parameters": router_parameters(spec),
           "experts": spec.moe.num_experts, "top_k": spec.moe.router_topk}
    from mindrl.config.roles import MoETraining
    from mindrl.models.builder import torch_dtype

    runs = [("moe_sequential", spec, MoETraining(grouped_gemm=False)), ("dense", dense, None)]
    if device.grouped_gemm(torch_dtype(args.dtype)) is not None:
        runs.insert(0, ("moe_grouped", spec, MoETraining(grouped_gemm=True)))
    for label, model, moe in runs:
        seconds, sync = time_updates(model, batch, layout["budget"], args.dtype, args.repeats,
                                     moe)
        median = statistics.median(seconds)
        out[f"{label}_update_s"] = median
        out[f"{label}_tokens_per_s"] = layout["real_tokens"] / median
        out[f"{label}_sync_bytes"] = sync["bytes"]
        out[f"{label}_sync_s_per_gb"] = sync["s_per_gb"]
        print(f"{label:14s} update {median:.3f} s ({out[f'{label}_tokens_per_s']:.0f} tokens/s), "
              f"sync source {sync['s_per_gb']:.3f} s/GB of {sync['bytes'] / 1e6:.1f} MB")
    grouped = "moe_grouped_tokens_per_s" in out and device.grouped_gemm_by_default()
    out["expert_kernel"] = "grouped" if grouped else "sequential"     # what null runs here
    for key in ("update_s", "tokens_per_s", "sync_bytes", "sync_s_per_gb"):
        out[f"moe_{key}"] = out[f"moe_{'grouped' if grouped else 'sequential'}_{key}"]
    out["update_ratio"] = out["moe_tokens_per_s"] / out["dense_tokens_per_s"]
    if "moe_grouped_tokens_per_s" in out:
        out["grouped_ratio"] = (out["moe_grouped_tokens_per_s"]
                                / out["moe_sequential_tokens_per_s"])
    out["sync_ratio"] = out["moe_sync_s_per_gb"] / out["dense_sync_s_per_gb"]
    emit(out, None, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
