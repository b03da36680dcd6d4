"""Does the embedded recipe learn, and hold what it learned, on several seeds?

    python bench/bench_learning.py                       # grpo_tiny_max_cpu, seeds 1 2 3, 300 steps
    python bench/bench_learning.py --seeds 1 2 --steps 200 rl_config.entropy_coeff=0

Runs cli/train_grpo.py as a user does, once per seed (`megatron_training.seed`, which also
seeds sampling and the prompt order), each in its own run directory under --work, and judges
every curve by mindrl/trainer/learning_curve.py: gain = mean score of the last 50 steps minus
the first 50 (bar: >= 0.5), and the largest fall of the 20-step moving average below its best
once it has reached 0.6 (bar: <= 0.15); and the greedy accuracy on the held-out validation set
after the last step (bar: >= 0.6, HELD_OUT). Extra arguments are Hydra overrides for every run.
Prints a table per seed with the held-out validation accuracy, then one JSON line.
Runs are sequential: on 2 cores a second run beside the first only slows both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.machine import cpu_model  # noqa: E402
from bench.common.results import add_results_argument, emit  # noqa: E402
from mindrl.trainer.learning_curve import policy_scores, summarize_curve  # noqa: E402

HELD_OUT = 0.6    # greedy accuracy on the held-out validation set after the last step (issue 41)


def read_rows(run_dir: Path) -> list:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in open(path)] if path.exists() else []


def run_seed(work: Path, seed: int, steps: int, overrides, recipe: str) -> dict:
    run_dir = work / "runs" / f"seed{seed}"
    rows = read_rows(run_dir)
    if rows and rows[-1]["step"] == steps:   # a finished run is reused, not trained again
        return {"rows": rows, "seconds": None}
    cmd = [sys.executable, str(ROOT / "cli" / "train_grpo.py"), "--config-name", recipe,
           f"run_dir={run_dir}", f"megatron_training.seed={seed}",
           f"megatron_training.train_iters={steps}", f"rl_config.save_freq={steps}", *overrides]
    env = {**os.environ, "MINDRL_WORK_DIR": str(work)}
    env.pop("RAY_ADDRESS", None)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(work), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
    return {"rows": read_rows(run_dir), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--recipe", default="grpo_tiny_max_cpu")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_learning")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    add_results_argument(parser)
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    results = {}
    print(f"{'seed':>4} {'first50':>8} {'last50':>7} {'gain':>6} {'cross':>6} {'maxfall':>8} "
          f"{'val first':>9} {'val last':>8} {'val max':>7} {'entropy last':>12} {'s':>6}")
    for seed in args.seeds:
        out = run_seed(work, seed, args.steps, args.overrides, args.recipe)
        rows = [r for r in out["rows"] if r["step"] > 0]
        scores = policy_scores(rows)
        s = summarize_curve(scores)
        val = [r["val/score"] for r in out["rows"] if "val/score" in r]
        entropy = sum(r["actor/entropy"] for r in rows[-50:]) / 50
        results[seed] = {"first": round(s.first, 4), "last": round(s.last, 4),
                         "gain": round(s.gain, 4), "crossed_at": s.crossed_at,
                         "max_drop": round(s.max_drop, 4),
                         "passes": s.passes() and bool(val) and val[-1] >= HELD_OUT,
                         "val": [round(v, 4) for v in val], "entropy_last50": round(entropy, 3)}
        crossed = "-" if s.crossed_at is None else str(s.crossed_at + 1)
        secs = "" if out["seconds"] is None else f"{out['seconds']:.0f}"
        print(f"{seed:>4} {s.first:>8.3f} {s.last:>7.3f} {s.gain:>+6.3f} {crossed:>6} "
              f"{s.max_drop:>8.3f} {val[0] if val else float('nan'):>9.3f} "
              f"{val[-1] if val else float('nan'):>8.3f} {max(val) if val else float('nan'):>7.3f} "
              f"{entropy:>12.3f} {secs:>6}", flush=True)
    gains = [r["gain"] for r in results.values()]
    drops = [r["max_drop"] for r in results.values()]
    emit({"bench": "learning", "recipe": args.recipe, "cpu": cpu_model(),
          "steps": args.steps, "overrides": args.overrides,
          "all_pass": all(r["passes"] for r in results.values()),
          "gain_min": min(gains), "gain_max": max(gains),
          "max_drop_max": max(drops), "seeds": results}, results=args.results)


if __name__ == "__main__":
    main()
