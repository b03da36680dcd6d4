"""Where a rollout's decode time goes: vLLM through MindRL's own engine, against the FLOP floor.

    python bench/profile_generate.py                                  # bench_e2e's 75m shape, fp32
    python bench/profile_generate.py --dtype bfloat16                 # its 75m_bf16 generation
    python bench/profile_generate.py --model tiny-qwen2 --max-tokens 16 --profile-tokens 8  # smoke

The model is random-init (`make_tiny_model`, char tokenizer); the engine is
`engines.vllm_engine.VLLMEngine` with the trainer's settings (eager, CPU threads, bf16 only
beside a bf16 actor) and exact-length sampling (`ignore_eos`), the bench_e2e layout: --prompts
x --n rows of --prompt-len + --max-tokens tokens. One warm-up generate, one timed generate of
the whole shape (its seconds per decode step), then --profile-tokens more under torch.profiler.
The ops' self time is split into matrix products (GEMM), attention and the rest; what the ops
do not account for is the engine's Python (scheduler, inputs, sampling bookkeeping, outputs).

The floor: 2 FLOPs per weight per token the forward sees, plus causal attention
(bench.common.flops.FlopModel), at the GEMM rate measured in the same run at the model's layer
sizes (`bench.common.gemm.matmul_gflops`). `decode_gemm_gflops` is the same rate at the decode shape
(rows x hidden times hidden x ffn): whether a decode step's products can run at that rate at
all. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.results import add_results_argument, emit  # noqa: E402

# Self-time buckets by op name: products of weights, attention kernels, everything else.
GEMM_OPS = ("_C::onednn_mm", "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")
ATTENTION_MARKS = ("attention", "attn", "reshape_and_cache")


def op_bucket(name: str) -> str:
    if name in GEMM_OPS:
        return "gemm"
    if any(mark in name for mark in ATTENTION_MARKS):
        return "attention"
    return "other"


def bucket_seconds(self_seconds: Iterable[Tuple[str, float]]) -> Dict[str, float]:
    """{gemm, attention, other: seconds} from (op name, self seconds) pairs. Composite ops
    (aten::linear, vllm's custom-op wrappers) hold little self time: their kernels count
    where they run."""
    out = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for name, seconds in self_seconds:
        out[op_bucket(name)] += seconds
    return out


def forward_tokens(rows: int, prompt_len: int, new_tokens: int) -> int:
    """Tokens the forwards see generating `new_tokens` per row: the prompt once (prefill),
    then one per decode step (the last sampled token is never fed back)."""
    return rows * (prompt_len + new_tokens - 1)


def generate_flops(flops, rows: int, prompt_len: int, new_tokens: int) -> float:
    """Per row, one causal forward over every token the forwards see (a KV cache makes
    prefill plus decode steps exactly that)."""
    return rows * flops.forward(forward_tokens(1, prompt_len, new_tokens))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bench-qwen2-75m")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--profile-tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json-out", type=Path, default=None)
    add_results_argument(ap)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    from torch.profiler import ProfilerActivity, profile

    from bench.common.flops import FlopModel, kv_cache_bytes
    from bench.common.gemm import matmul_gflops
    from mindrl import device
    from mindrl.config.model_spec import load_model_spec
    from mindrl.config.schema import GenerateConfig, SamplingConfig
    from mindrl.engines.vllm_engine import VLLMEngine
    from mindrl.models.tiny import make_tiny_model

    bf16 = args.dtype == "bfloat16"
    if bf16 and not device.bf16_supported():
        raise SystemExit("--dtype bfloat16: this CPU has no bf16 instructions "
                         "(torch.cpu.get_capabilities()); profile --dtype float32 instead")
    spec = load_model_spec(args.model)
    rows = args.prompts * args.n
    longest = args.prompt_len + max(args.max_tokens, args.profile_tokens)
    config = GenerateConfig(
        max_num_seqs=rows, max_model_len=32 * -(-longest // 32),
        max_num_batched_tokens=max(4096, rows * args.prompt_len), dtype=args.dtype,
        kv_cache_memory_bytes=kv_cache_bytes(args.model, rows, longest),
        block_size=32, enforce_eager=True, cpu_threads=args.threads,
        sampling_config=SamplingConfig(max_tokens=args.max_tokens, ignore_eos=True, seed=0,
                                       temperature=1.0, top_p=1.0, top_k=-1))
    prompts = [[3 + (i * 7 + j) % 90 for j in range(args.prompt_len)]
               for i in range(args.prompts)]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(args.model, "char", Path(tmp) / "model")
        engine = VLLMEngine(model_dir, config, seed=0, actor_dtype=args.dtype)
        try:
            engine.generate(prompts, args.n, max_tokens=8, seed=1)            # warm-up
            start = time.perf_counter()
            out = engine.generate(prompts, args.n, seed=2)
            gen_s = time.perf_counter() - start
            assert sum(map(len, out.response_token_ids)) == rows * args.max_tokens
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                start = time.perf_counter()
                engine.generate(prompts, args.n, max_tokens=args.profile_tokens, seed=3)
                profiled_s = time.perf_counter() - start
        finally:
            engine.close()

    events = prof.key_averages()
    buckets = bucket_seconds((e.key, e.self_cpu_time_total / 1e6) for e in events)
    steps = args.profile_tokens
    flops = FlopModel.of(args.model)
    rate = matmul_gflops(args.threads, bf16)
    decode_rate = matmul_gflops(args.threads, bf16, seconds=2.0,
                                shape=(rows, spec.hidden_size, spec.ffn_hidden_size))
    gen_floor = generate_flops(flops, rows, args.prompt_len, args.max_tokens) / (rate * 1e9)
    weight_flops = 2 * flops.weights * forward_tokens(rows, args.prompt_len, steps)
    ops_s = sum(buckets.values())
    ms = {k: 1e3 * v / steps for k, v in buckets.items()}
    result = {
        "bench": "profile_generate", "model": args.model, "dtype": args.dtype,
        "threads": args.threads, "rows": rows, "prompt_len": args.prompt_len,
        "max_tokens": args.max_tokens, "gen_s": gen_s,
        "decode_step_ms": 1e3 * gen_s / args.max_tokens, "flop_floor_s": gen_floor,
        "gen_over_flop_floor": gen_s / gen_floor,
        "floor_step_ms": 1e3 * gen_floor / args.max_tokens,
        "matmul_gflops": rate, "decode_gemm_gflops": decode_rate,
        "profiled_tokens": steps, "profiled_step_ms": 1e3 * profiled_s / steps,
        "gemm_ms_per_step": ms["gemm"], "gemm_gflops": weight_flops / buckets["gemm"] / 1e9
        if buckets["gemm"] else None,
        "attention_ms_per_step": ms["attention"], "other_ops_ms_per_step": ms["other"],
        "outside_ops_ms_per_step": 1e3 * max(0.0, profiled_s - ops_s) / steps,
        "top_ops": [{"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3,
                     "bucket": op_bucket(e.key)}
                    for e in sorted(events, key=lambda e: e.self_cpu_time_total,
                                    reverse=True)[:args.top]]}
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.top,
                       max_name_column_width=50))
    print(f"{args.model} {args.dtype}, {rows} rows: {gen_s:.2f} s for {args.max_tokens} "
          f"tokens, {result['decode_step_ms']:.1f} ms a step; floor {result['floor_step_ms']:.1f}"
          f" ms ({result['gen_over_flop_floor']:.2f}x) at {rate:.0f} GFLOP/s "
          f"(decode-shaped GEMM: {decode_rate:.0f})")
    print(f"profiled step {result['profiled_step_ms']:.1f} ms: GEMM {ms['gemm']:.1f} ms "
          f"({result['gemm_gflops'] or 0:.0f} GFLOP/s), attention {ms['attention']:.1f}, other "
          f"ops {ms['other']:.1f}, outside the ops {result['outside_ops_ms_per_step']:.1f}")
    emit(result, args.json_out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
