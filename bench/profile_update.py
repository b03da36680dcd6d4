"""Where a packed update step's time goes, on whatever device mindrl.device picks.

    python bench/profile_update.py                       # qwen25-0.5b shape, bf16, 64 samples
    python bench/profile_update.py --model tiny-qwen2 --samples 16 --dtype float32   # CPU smoke
    python bench/profile_update.py --chunk-kernels eager   # the vocabulary chunks in place

One rank builds the Megatron engine with packed rows and a token budget
(bench/device/check_device.py's part 5c layout: natural lengths, budget 4 x the longest
sample), runs one warm-up update and then one under torch.profiler. Prints the step's
seconds, the device's busy seconds (its kernels), the top ops by self device time and by self
host time, and MFU: the step's FLOPs (6 x parameters x real tokens, plus causal attention on
the real lengths) over the seconds and the device's bf16/fp32 matmul rate measured in the same
run (bench.common.gemm.matmul_tflops). One JSON line at the end.

--chunk-kernels picks how response_token_stats runs its vocabulary chunks: `device` (the
default: fused compiled kernels where mindrl.device compiles them) or `eager` (in place). With
fused kernels the JSON also holds their parity with the eager chunks on one packed row of the
model's vocabulary (log-probs, entropy, gradient).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.batches import natural_batch, pack_layout  # noqa: E402
from bench.common.gemm import matmul_tflops  # noqa: E402
from bench.common.results import add_results_argument, emit  # noqa: E402
from bench.common.update_engine import pack_engine  # noqa: E402

# Dense (no sparsity) tensor-core peaks, TFLOP/s, from the vendors' datasheets (SXM parts).
PUBLISHED_PEAK_TFLOPS = {("H100", "bfloat16"): 989.0, ("H200", "bfloat16"): 989.0,
                         ("H100", "float32"): 67.0, ("H200", "float32"): 67.0}


def published_peak_tflops(dtype: str):
    """The datasheet peak of this CUDA device for `dtype`, None where unknown (CPU too)."""
    from mindrl import device

    if device.device_type() != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name()
    return next((v for (part, d), v in PUBLISHED_PEAK_TFLOPS.items()
                 if part in name and d == dtype), None)


def eng_micro_batches(lengths, budget: int) -> int:
    from mindrl.data.rows.plans import plan_by_tokens

    return len(plan_by_tokens(lengths, 1, budget)[0])


def step_flops(spec, lengths) -> float:
    """6 x active params per real token, plus causal attention (QK^T and PV, forward and
    backward)."""
    attention = sum(4 * spec.hidden_size * spec.num_layers * n * (n + 1) / 2 * 3
                    for n in lengths)
    return 6 * spec.num_parameters(active=True) * sum(lengths) + attention


def chunk_parity(vocab: int, dtype: str, kernels, dev, tokens: int = 2048) -> dict:
    """Fused vs eager chunks on one packed row [1, tokens, vocab] of random logits in `dtype`:
    the largest log-prob and entropy differences and the gradient's relative difference."""
    import torch

    from mindrl.engines import vocab_parallel

    g = torch.Generator(device=dev).manual_seed(0)
    logits = (torch.randn(1, tokens, vocab, generator=g, device=dev) * 4).to(getattr(torch,
                                                                                      dtype))
    positions = torch.arange(tokens - 1, device=dev)[None]
    targets = torch.randint(0, vocab, (1, tokens - 1), generator=g, device=dev)
    weights = torch.randn(2, 1, tokens - 1, generator=g, device=dev)
    runs = []
    for k in (None, kernels):
        leaf = logits.clone().requires_grad_(True)
        logp, ent = vocab_parallel.response_token_stats(leaf, positions, targets, vocab, 1.0,
                                                        kernels=k)
        ((weights[0] * logp).sum() + (weights[1] * ent).sum()).backward()
        runs.append((logp.detach(), ent.detach(), leaf.grad.float()))
    (lp0, e0, g0), (lp1, e1, g1) = runs
    return {"logprob_max_diff": (lp0 - lp1).abs().max().item(),
            "entropy_max_diff": (e0 - e1).abs().max().item(),
            "grad_rel_diff": ((g0 - g1).norm() / g0.norm()).item()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen25-0.5b")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--response", type=int, default=1024)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--matmul-n", type=int, default=4096)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--chunk-kernels", default="device", choices=["device", "eager"])
    ap.add_argument("--lengths", default="natural", choices=["natural", "fixed"],
                    help="fixed: every response exactly --response tokens (bench_e2e's 75m "
                         "shape), prompts still P/8..P")
    ap.add_argument("--padded", type=int, default=None, metavar="ROWS",
                    help="padded rows of ROWS samples per micro batch instead of packing")
    ap.add_argument("--budget", type=int, default=None,
                    help="real tokens per micro batch (default: 4 x the longest sample)")
    ap.add_argument("--distributed-optimizer", action="store_true",
                    help="Megatron's distributed optimizer (one rank: its code path, no "
                         "sharding gain)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the device's published dense peak for --dtype (default: "
                         "PUBLISHED_PEAK_TFLOPS by device name, where known)")
    add_results_argument(ap)
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from mindrl import device
    from mindrl.config.model_spec import load_model_spec
    from mindrl.data.batch import Batch

    from mindrl.engines import vocab_parallel

    device.init_distributed(0, 1)
    dev = device.current_device()
    if args.chunk_kernels == "eager":
        vocab_parallel.device_chunk_kernels = lambda: None   # every pass: the in-place chunks
    kernels = vocab_parallel.device_chunk_kernels()
    spec = load_model_spec(args.model)
    spec = dataclasses.replace(spec, max_position_embeddings=max(
        spec.max_position_embeddings, args.prompt + args.response))
    b = natural_batch(spec.vocab_size, args.samples, args.prompt, args.response, seed=7,
                      fixed_response=args.lengths == "fixed")
    layout = pack_layout(b)
    budget = args.budget or layout["budget"]
    if budget < max(layout["lengths"]):
        raise SystemExit(f"--budget {budget} is below the longest sample "
                         f"({max(layout['lengths'])} tokens)")
    eng = pack_engine(spec, args.dtype, None if args.padded else budget,
                      distributed_optimizer=args.distributed_optimizer,
                      micro_batch_size=args.padded)
    batch = Batch.of(**b)
    warm = eng.update(batch, mini_batch_size=len(batch))          # warm-up (and compile)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.device_type() == "cuda" else [])
    device.synchronize()
    t = time.perf_counter()
    with profile(activities=activities) as prof:
        eng.update(batch, mini_batch_size=len(batch))
        device.synchronize()
    step_s = time.perf_counter() - t
    device.synchronize()
    t = time.perf_counter()
    eng.update(batch, mini_batch_size=len(batch))            # unprofiled, for the MFU
    device.synchronize()
    plain_s = time.perf_counter() - t

    events = prof.key_averages()
    on_device = device.device_type() == "cuda"
    # The kernels' own rows (device_type CUDA), as torch's table totals them: the ops that
    # launched them carry the same time again.
    from torch.autograd import DeviceType

    busy_s = (sum(e.self_device_time_total for e in events
                  if e.device_type == DeviceType.CUDA and not e.is_user_annotation) / 1e6
              if on_device else None)
    flops = step_flops(spec, layout["lengths"])
    rate = matmul_tflops(getattr(torch, args.dtype), dev, args.matmul_n)
    peak = args.peak_tflops or published_peak_tflops(args.dtype)
    out = {"bench": "profile_update", "device": device.device_type(), "torch": torch.__version__,
           "device_name": (torch.cuda.get_device_name() if device.device_type() == "cuda"
                           else device.device_type()),
           "model": args.model, "dtype": args.dtype, "samples": args.samples,
           "real_tokens": layout["real_tokens"], "lengths": args.lengths,
           "budget": None if args.padded else budget, "padded_rows": args.padded,
           "micro_batches": (-(-args.samples // args.padded) if args.padded
                             else eng_micro_batches(layout["lengths"], budget)),
           "distributed_optimizer": args.distributed_optimizer,
           "published_peak_tflops": peak,
           "mfu_vs_published_peak": (flops / plain_s / 1e12 / peak) if peak else None,
           "step_s_profiled": step_s, "step_s": plain_s, "device_busy_s": busy_s,
           "step_tflop": flops / 1e12, "matmul_tflops": rate,
           "achieved_tflops": flops / plain_s / 1e12,
           "mfu_vs_measured_matmul": flops / plain_s / 1e12 / rate,
           "chunk_kernels": "fused" if kernels is not None else "eager",
           "first_update": {k: warm[k] for k in ("actor/pg_loss", "actor/grad_norm")
                            if k in warm}}
    if kernels is not None:
        out["fused_vs_eager"] = chunk_parity(spec.vocab_size, args.dtype, kernels, dev)
    sort_keys = (["self_device_time_total"] if on_device else []) + ["self_cpu_time_total"]
    for key in sort_keys:
        print(f"\ntop {args.top} by {key}:")
        print(events.table(sort_by=key, row_limit=args.top, max_name_column_width=60))
        out[f"top_{key}"] = [
            {"op": e.key, "calls": e.count,
             "self_device_ms": (e.self_device_time_total / 1e3 if on_device else None),
             "self_cpu_ms": e.self_cpu_time_total / 1e3}
            for e in sorted(events, key=lambda e: getattr(e, key), reverse=True)[:args.top]]
    print(f"step {plain_s:.3f} s ({step_s:.3f} s profiled), device busy "
          f"{busy_s if busy_s is None else round(busy_s, 3)} s, {flops / 1e12:.2f} TFLOP, "
          f"{out['achieved_tflops']:.1f} TFLOP/s of {rate:.1f} measured matmul "
          f"(MFU {out['mfu_vs_measured_matmul']:.1%}"
          + (f"; {out['mfu_vs_published_peak']:.1%} of the published {peak:g}" if peak else "")
          + ")")
    emit(out, args.json_out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
