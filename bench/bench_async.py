"""Asynchronous GRPO against the synchronous loop: the same recipe, slots and lengths.

    python bench/bench_async.py                    # natural lengths at 75M, 64 completions a step
    python bench/bench_async.py --prompts 4 --n 4  # 16 a step (the first run, 2026-11-27)
    python bench/bench_async.py --steps 2 --prompts 2 --n 4 --max-tokens 64   # smoke run

Each loop runs cli/train_grpo.py (bench_e2e's `natural` shape, bench/common/shapes.py, and its
MindRL overrides, bench/common/mindrl_runs.py: the 75M Qwen2 from random init, free sampling
up to 1024 tokens with no ignore_eos and no min_tokens, so the lengths the policy chooses,
about 60 on average with a long tail),
back to back in one invocation, on one layout: the vLLM engine on a CPU slot of its own
(`generate_config.rollout_devices: 1`, as asynchronous mode requires) and the actor on the
other, each process with --threads torch threads (default 1: one core each on 2 cores). The
loops (MODES): `sync` (rl_config.async_mode: off, the synchronous trainer on the same layout),
`one_step` (async_mode one_step, a bound of 1) and `bounded2` (async_mode bounded,
max_staleness 2); `bounded2_partial` (asked by --modes) is bounded2 with partial rollouts in one
chunk of the whole length, so that each weight sync stops the batches in flight after the
engine's current decode step instead of waiting for them; `bounded2_inflight` and
`bounded2_recompute` (asked by --modes) are bounded2 whose syncs land between the engine's
decode steps while it keeps generating (rl_config.inflight_sync keep_kv / recompute_kv). The first step is warm-up; at least 5 steps after it are timed (a run with
fewer says so, as bench_e2e does). Every loop runs TAIL (2) steps more. The ratio
`async_speedup_natural` is over whole runs: every loop generates and trains the same batches
(the same prompts and seeds, steps + TAIL of them), and its completion tokens/s is all of them
over all its step seconds, the first step included. A window of steps is not fair to compare:
at bound k the batch a step trains is not the one it generates (k steps later), so a 5-step
window trains other batches than it generates, and the last k steps only train (the run admits
nothing past its last step); timing those gave bounded2 2.1x from its end alone in a first try.
The step times and idle fractions are over the steady steps: after the first, before the last
k (BOUND).

Per loop, over the timed steps (medians unless said): step seconds (min and median),
completion tokens/s (the step's trained completion tokens over its seconds), and each side's
idle share of the step:
  engine_idle_fraction  seconds no engine generated, over the step: async/engine_idle_s
                        (the step's window with no admitted batch generating) plus the weight
                        sync (timing_s/reshard, outside that window); synchronous: the step
                        less its generation (timing_s/gen), which holds the sync too;
  actor_wait_fraction   seconds the actor waited for samples, over the step:
                        async/actor_wait_s; synchronous: timing_s/gen;
  overlap_fraction      async/overlap_fraction (the actor's training time during which
                        engines generated); synchronous: 0;
and staleness: the mean of rollout/staleness_mean and the max of rollout/staleness_max.

Prints a table, then one JSON line: `async_speedup_natural` (one_step's whole-run completion
tokens/s over sync's), `async_speedup_natural_bounded2`, every loop's figures with the loop's name as
suffix, the completion lengths each loop saw, the machine, the commit and the load average
before and after; with --results the line joins the results file (bench "async"). Figures:
docs/benchmarks.md#bench_async-asynchronous-against-synchronous.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.machine import machine_info  # noqa: E402
from bench.common.mindrl_runs import mindrl_metrics, mindrl_step  # noqa: E402
from bench.common.results import add_results_argument, emit, git_commit  # noqa: E402
from bench.common.shapes import SHAPES, Shape, shrink  # noqa: E402
from bench.common.steps import summary, timed_steps  # noqa: E402

# Each loop's overrides after the shape's; every loop gets LAYOUT.
MODES: Dict[str, List[str]] = {
    "sync": ["++rl_config.async_mode=off"],
    "one_step": ["++rl_config.async_mode=one_step", "++rl_config.max_staleness=1"],
    "bounded2": ["++rl_config.async_mode=bounded", "++rl_config.max_staleness=2"],
    # bounded2 whose syncs stop the batches in flight after the engine's current decode step
    # (partial rollouts in one chunk of the whole length: `partial_overrides`)
    "bounded2_partial": ["++rl_config.async_mode=bounded", "++rl_config.max_staleness=2"],
    # bounded2 whose syncs land between the engine's decode steps without stopping anything
    # (rl_config.inflight_sync: engines/vllm_inflight.py)
    "bounded2_inflight": ["++rl_config.async_mode=bounded", "++rl_config.max_staleness=2",
                          "++rl_config.inflight_sync=keep_kv"],
    "bounded2_recompute": ["++rl_config.async_mode=bounded", "++rl_config.max_staleness=2",
                           "++rl_config.inflight_sync=recompute_kv"],
}
DEFAULT_MODES = ("sync", "one_step", "bounded2")
PARTIAL = ("bounded2_partial",)
LAYOUT = ["++generate_config.rollout_devices=1"]
# Each loop's staleness bound (config/checks/asynchronous.staleness_bound): its last BOUND
# steps only train. Every loop runs TAIL steps more than asked, so that all train the same
# batches.
BOUND = {"sync": 0, "one_step": 1, "bounded2": 2, "bounded2_partial": 2,
         "bounded2_inflight": 2, "bounded2_recompute": 2}
TAIL = max(BOUND.values())
ASYNC_MODES = ("one_step", "bounded2", "bounded2_partial", "bounded2_inflight",
               "bounded2_recompute")                      # the loops compared with sync


def mode_shape(shape: Shape, mode: str, threads: int) -> Shape:
    """The shape as one loop runs it: its own run dir (runs/mindrl-async-<mode>), the threads,
    and TAIL steps more."""
    return dataclasses.replace(shape, name=f"async-{mode}", threads=threads,
                               steps=shape.steps + TAIL)


def steady_steps(steps: List[dict], mode: str) -> List[dict]:
    """The steps before the loop's train-only tail (its last BOUND[mode])."""
    return steps[:len(steps) - BOUND[mode]]


def whole_run(steps: List[dict]) -> dict:
    """The run's completion tokens over its step seconds, every step counted."""
    tokens, seconds = sum(s["completion_tokens"] for s in steps), sum(s["step_s"] for s in steps)
    return {"run_completion_tokens": tokens, "run_s": seconds,
            "run_completion_tokens_per_s": tokens / seconds}


def overrides(mode: str, shape: Shape) -> List[str]:
    """The loop's overrides; a partial loop's one chunk is the shape's whole length, so only
    a sync cuts a generation."""
    chunk = [f"++rl_config.partial_rollout_tokens={shape.max_tokens}"] if mode in PARTIAL else []
    return [*LAYOUT, *MODES[mode], *chunk]


def async_step(row: dict, completions: int) -> dict:
    """One metrics.jsonl row as a step row (common/mindrl_runs.mindrl_step) plus the idle
    seconds of each side and the staleness (the synchronous loop's from its timings; see the
    module docstring)."""
    step = mindrl_step(row, completions)
    if "async/engine_idle_s" in row:
        engine_idle = row["async/engine_idle_s"] + row["timing_s/reshard"]
        actor_wait = row["async/actor_wait_s"]
    else:
        engine_idle, actor_wait = step["step_s"] - step["gen_s"], step["gen_s"]
    return {**step, "engine_idle_s": engine_idle, "actor_wait_s": actor_wait,
            "overlap_fraction": row.get("async/overlap_fraction", 0.0),
            "staleness_mean": row.get("rollout/staleness_mean", 0.0),
            "staleness_max": row.get("rollout/staleness_max", 0.0)}


def async_summary(steps: List[dict]) -> dict:
    """The step rows' summary (common/steps.summary) plus the idle fractions (medians of the
    per-step shares) and the staleness over the timed steps."""
    timed = timed_steps(steps)

    def share(key):
        return statistics.median(s[key] / s["step_s"] for s in timed)

    return {**summary(steps), "engine_idle_fraction": share("engine_idle_s"),
            "actor_wait_fraction": share("actor_wait_s"),
            "overlap_fraction": statistics.median(s["overlap_fraction"] for s in timed),
            "staleness_mean": statistics.fmean(s["staleness_mean"] for s in timed),
            "staleness_max": max(s["staleness_max"] for s in timed)}


def headline(results: Dict[str, dict]) -> dict:
    """The JSON line's figures: each asynchronous loop's tokens/s over sync's, and every loop's
    step, tokens/s, idle fractions, staleness and lengths, suffixed by the loop."""
    out: dict = {}
    sync = results.get("sync")
    for mode in ASYNC_MODES:
        if sync is not None and mode in results:
            key = "async_speedup_natural" + ("" if mode == "one_step" else f"_{mode}")
            out[key] = round(results[mode]["run_completion_tokens_per_s"]
                             / sync["run_completion_tokens_per_s"], 3)
    for mode, r in results.items():
        out.update({f"{key}_{mode}": round(r[key], 4) for key in (
            "run_completion_tokens_per_s", "run_s", "completion_tokens_per_s", "step_s_min", "step_s_median", "engine_idle_fraction",
            "actor_wait_fraction", "overlap_fraction", "staleness_mean", "staleness_max")})
        out[f"timed_steps_{mode}"] = r["timed_steps"]
    out["completion_length"] = {mode: r["completion_length"] for mode, r in results.items()}
    return out


def print_table(results: Dict[str, dict]) -> None:
    cols = ("run_s", "run_completion_tokens_per_s", "step_s_min", "step_s_median", "gen_s",
            "update_s", "sync_s", "completion_tokens_per_s", "engine_idle_fraction", "actor_wait_fraction",
            "overlap_fraction", "staleness_mean", "staleness_max")
    print(f"{'loop':9} " + " ".join(f"{c[:11]:>11}" for c in cols) + f" {'len_mean':>9}")
    for mode, r in results.items():
        print(f"{mode:9} " + " ".join(f"{r[c]:11.3f}" for c in cols)
              + f" {r['completion_length']['mean']:9.1f}")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"of {', '.join(MODES)}")
    ap.add_argument("--steps", type=int, default=None, help="steps per loop (default 6: 1 "
                                                            "warm-up + 5 timed)")
    ap.add_argument("--prompts", type=int, default=None, help="override prompts per step")
    ap.add_argument("--n", type=int, default=None, help="override samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=None, help="override the length cap")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the actor and of the engine, each")
    ap.add_argument("--work", type=Path, default=ROOT / "work" / "bench_e2e",
                    help="bench_e2e's work dir (its model and data are reused)")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    args.modes = args.modes.split(",")
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        ap.error(f"unknown loop(s) {unknown}: use {', '.join(MODES)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    shape = shrink(SHAPES["natural"], args.steps, args.prompts, args.n, args.max_tokens)
    load_before = round(os.getloadavg()[0], 2)
    results: Dict[str, dict] = {}
    for mode in args.modes:
        run = mode_shape(shape, mode, args.threads)
        print(f"[{mode}] {run.steps} steps ...", flush=True)
        steps = [async_step(row, run.completions)
                 for row in mindrl_metrics(run, work, overrides(mode, run))]
        results[mode] = {**async_summary(steady_steps(steps, mode)), **whole_run(steps),
                         "train_only_tail_steps": BOUND[mode]}
        print({mode: {k: v for k, v in results[mode].items() if k != "completion_length"}},
              flush=True)
    print_table(results)
    emit({**headline(results), "load_avg_1m_before": load_before,
          "load_avg_1m_after": round(os.getloadavg()[0], 2), "commit": git_commit(),
          "shape": dataclasses.asdict(mode_shape(shape, "natural", args.threads)),
          "machine": machine_info([mode_shape(shape, "natural", args.threads)]),
          "modes": results}, results=args.results, bench="async")


if __name__ == "__main__":
    main()
