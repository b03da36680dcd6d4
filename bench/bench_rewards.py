"""Verifier pool throughput: many cheap reward jobs through VerifierPool, against a serial
baseline measured in the same run.

    python bench/bench_rewards.py                         # 2000 arith jobs, 1 and 2 workers
    python bench/bench_rewards.py --jobs 200 --repeats 1  # a quick run
    python bench/bench_rewards.py --verifier acc --jobs 500   # math-verify's boxed answers

The serial baseline runs the same jobs one after another in this process through the code a
worker runs per job (`mindrl.rewards.pool._run_job`: look up the verifier, call it, check the
score), so it is the verifier's own cost with no pipes, pickling or processes. Each pool
(forkserver workers, start-up not timed) is warmed with one small map, then times `map(jobs)`
over the whole list; every outcome is checked against the serial run's (status and score, in
order), and a mismatch ends the bench with exit 1. Best of --repeats for each.
The jobs alternate a right and a wrong answer, so half score 1 and half 0.

`pool_over_serial_<N>`: jobs/s with N workers / serial jobs/s. For a verifier as cheap as
arith this is below 1 (a job costs microseconds, so the pool's per-job messaging dominates);
it shows what the pool costs per job. For a costly verifier it shows the parallel gain.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.results import add_results_argument, emit  # noqa: E402


def make_jobs(verifier: str, count: int) -> list:
    """(verifier, completion, label, extra) jobs; even ones right, odd ones wrong."""
    jobs = []
    for i in range(count):
        answer, given = i % 10, (i % 10 if i % 2 == 0 else (i + 1) % 10)
        if verifier == "arith":
            completion = str(given)
        else:
            completion = (f"<think>\nwork {i}\n</think>\n<answer>\n\\boxed{{{given}}}\n"
                          f"</answer>")
        jobs.append((verifier, completion, str(answer), {}))
    return jobs


def serial(jobs: list) -> tuple:
    """Seconds and outcomes (status, value) running the jobs one by one in this process."""
    from mindrl.rewards import pool as pool_mod
    from mindrl.rewards.registry import get_verifier

    start = time.perf_counter()
    out = [pool_mod._run_job(get_verifier, *job) for job in jobs]
    seconds = time.perf_counter() - start
    return seconds, [(status, value) for status, value, _ in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--workers", default="1,2", help="comma-separated pool sizes")
    ap.add_argument("--verifier", default="arith", help="a registered verifier, e.g. arith, acc")
    ap.add_argument("--repeats", type=int, default=3, help="timed maps per setting; best kept")
    ap.add_argument("--timeout", type=float, default=30.0, help="per-job timeout (s)")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mindrl.rewards import VerifierPool

    jobs = make_jobs(args.verifier, args.jobs)
    serial(jobs[:50])                                   # imports, first-call caches
    serial_s, expected = min((serial(jobs) for _ in range(args.repeats)), key=lambda r: r[0])
    if sum(v for _, v in expected) != sum(1 for i in range(args.jobs) if i % 2 == 0):
        print(f"FAILED: the serial run scored {sum(v for _, v in expected)} of {args.jobs}, "
              "expected one per right answer")
        return 1

    rows = [("serial, in process [baseline]", serial_s, None)]
    startup = {}
    for n in [int(w) for w in args.workers.split(",")]:
        start = time.perf_counter()
        with VerifierPool(num_workers=n, timeout=args.timeout) as pool:
            pool.map(jobs[:4 * n])                       # every worker up and answering
            startup[n] = time.perf_counter() - start
            best = float("inf")
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = pool.map(jobs)
                best = min(best, time.perf_counter() - t)
                got = [(o.status, o.value) for o in out]
                if got != expected:
                    bad = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
                    print(f"FAILED: pool of {n} gave {got[bad]} for job {bad}, serial gave "
                          f"{expected[bad]}")
                    return 1
            restarts = pool.restarts
        rows.append((f"VerifierPool, {n} worker(s)", best, n))
        if restarts:
            print(f"note: {restarts} worker restart(s) with {n} worker(s)")

    print(f"{args.jobs} {args.verifier} jobs on {os.cpu_count()} cores, best of {args.repeats}")
    print(f"{'run':<32} {'seconds':>8} {'jobs/s':>10} {'us/job':>8} {'x serial':>9} "
          f"{'start-up s':>10}")
    for name, seconds, n in rows:
        print(f"{name:<32} {seconds:8.3f} {args.jobs / seconds:10.0f} "
              f"{seconds / args.jobs * 1e6:8.1f} {serial_s / seconds:9.3f} "
              f"{(f'{startup[n]:.2f}' if n else '-'):>10}")
    print("x serial: pool jobs/s / serial jobs/s (same jobs, same run); start-up: pool start "
          "and one warm-up map, not in seconds")
    result = {"bench": "rewards", "verifier": args.verifier, "jobs": args.jobs,
              "cores": os.cpu_count(), "repeats": args.repeats,
              "serial_jobs_per_s": round(args.jobs / serial_s, 1)}
    for name, seconds, n in rows[1:]:
        result[f"pool_jobs_per_s_{n}"] = round(args.jobs / seconds, 1)
        result[f"pool_over_serial_{n}"] = round(serial_s / seconds, 4)
        result[f"pool_us_per_job_{n}"] = round(seconds / args.jobs * 1e6, 1)
    emit(result, results=args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
