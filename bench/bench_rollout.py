"""Rollout scaling: a step's generation tokens/s through the trainer's own rollout path
(`mindrl.rollout.RolloutGroup`: Ray engine actors, prompts split by group, merged in prompt
order) with 1 and with 2 engines, one thread each, measured in the same run.

    python bench/bench_rollout.py                      # 75M shape, 64 prompts x 256 tokens
    python bench/bench_rollout.py --model tiny-qwen2 --prompts 16 --max-tokens 32   # smoke

Each engine gets its own logical CPU (a placement-group bundle); generation is exact-length
(`ignore_eos`), so both runs produce the same number of tokens. Per engine count: one warm-up
generate, then --repeats timed ones (the median is reported). `rollout_scaling_2` =
tokens/s with 2 engines / tokens/s with 1: the goal is >= 1.8 on a quiet machine (two cores
that nothing else uses; on a busy box it falls toward 1.0, see
docs/platforms.md#the-cluster-path-on-cpu). The busy fraction of each engine (its time to
answer / the slowest one's) shows an imbalance.
Prints a table, then one JSON line.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.results import add_results_argument, emit  # noqa: E402


def _group(model_dir, engines, max_tokens, prompts, pg):
    from mindrl.config.schema import GenerateConfig, SamplingConfig
    from mindrl.rollout.engine_group import RolloutGroup
    from mindrl.workers.placement import EngineSlot
    from mindrl.workers.worker_group import worker_env

    config = GenerateConfig(max_num_seqs=prompts, max_model_len=max_tokens + 32,
                            max_num_batched_tokens=max(4096, prompts * 32),
                            kv_cache_memory_bytes=512 * 2**20, cpu_threads=1,
                            sampling_config=SamplingConfig(max_tokens=max_tokens,
                                                           ignore_eos=True, seed=0))
    slots = [EngineSlot(pg, i, {"num_cpus": 1}, (i,)) for i in range(engines)]
    group = RolloutGroup(model_dir, config, 0, slots, worker_env())
    group.start()
    return group


def measure(model_dir, engines, prompt_ids, max_tokens, repeats, pg):
    from mindrl.data.batch import Batch

    group = _group(model_dir, engines, max_tokens, len(prompt_ids), pg)
    batch = Batch.from_prompts(prompt_ids, 1, pad_id=0)   # the trainer's step input
    try:
        group.generate(batch, seed=1)          # warm-up
        times, busy = [], []
        for r in range(repeats):
            t0 = time.perf_counter()
            out = group.generate(batch, seed=2 + r)
            times.append(time.perf_counter() - t0)
            busy.append(list(group.busy_seconds))
        tokens = int(out["response_mask"].sum())
        assert tokens == len(prompt_ids) * max_tokens, tokens
    finally:
        group.shutdown()
    seconds = statistics.median(times)
    slowest = [max(b) for b in busy]
    fractions = [statistics.median(b[e] / s for b, s in zip(busy, slowest))
                 for e in range(engines)]
    return {"engines": engines, "seconds": seconds, "tokens": tokens,
            "tokens_per_s": tokens / seconds, "busy_fraction": fractions}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bench-qwen2-75m")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    add_results_argument(ap)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.util.placement_group import placement_group

    from mindrl.models.tiny import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(args.model, "char", Path(tmp) / "model")
        prompt_ids = [[3 + (i * 7 + j) % 90 for j in range(8 + i % 8)]
                      for i in range(args.prompts)]
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=256 * 2**20)
        try:
            pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
            pg.wait(60)
            rows = [measure(model_dir, n, prompt_ids, args.max_tokens, args.repeats, pg)
                    for n in (1, 2)]
        finally:
            ray.shutdown()
    print(f"{'engines':>7} {'seconds':>8} {'tokens':>7} {'tokens/s':>9}  busy fraction")
    for r in rows:
        print(f"{r['engines']:>7} {r['seconds']:>8.2f} {r['tokens']:>7} "
              f"{r['tokens_per_s']:>9.1f}  {', '.join(f'{f:.2f}' for f in r['busy_fraction'])}")
    scaling = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
    emit({"bench": "rollout", "model": args.model, "prompts": args.prompts,
          "max_tokens": args.max_tokens, "rollout_scaling_2": round(scaling, 3),
          "goal": ">= 1.8 on a quiet machine",
          "busy_fraction_2": [round(f, 3) for f in rows[1]["busy_fraction"]],
          "tokens_per_s": {str(r["engines"]): round(r["tokens_per_s"], 1) for r in rows}},
         results=args.results)


if __name__ == "__main__":
    main()
