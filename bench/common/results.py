"""A bench's last output and where it is kept. Every bench ends with one JSON line of its
figures (stdout, and --json-out); with --results (or $MINDRL_BENCH_RESULTS) the line is also
appended to a results file, with the machine, the date, the commit and the command line added,
so that figures can be compared run to run. `python -m bench.common.results [files or dirs]`
prints the newest line of every bench as a markdown table (docs show current figures from it).

    python bench/bench_rewards.py --results bench/results/      # -> bench/results/rewards.jsonl
    python -m bench.common.results                              # bench/results/*.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional

RESULTS_ENV = "MINDRL_BENCH_RESULTS"
ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "bench" / "results"


def add_results_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results", type=Path, default=None,
        help=f"append the final JSON line, with machine, date and commit, to this .jsonl file "
             f"(a directory: <dir>/<bench>.jsonl); default ${RESULTS_ENV}, else nowhere")


def results_file(target, bench: str) -> Optional[Path]:
    """Where `bench`'s line goes: a .jsonl file as given, `<bench>.jsonl` inside a directory,
    None when neither the argument nor $MINDRL_BENCH_RESULTS names a place."""
    target = target or os.environ.get(RESULTS_ENV)
    if not target:
        return None
    path = Path(target)
    return path if path.suffix == ".jsonl" else path / f"{bench}.jsonl"


def git_commit(root: Path = ROOT) -> Optional[str]:
    """HEAD's short hash, `-dirty` when tracked files differ from it; None outside a checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30)
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine() -> dict:
    """machine_facts plus the device the run used (cpu / cuda / npu) and the load average as
    the run ended (timings from a machine busy with other work are not the machine's)."""
    from bench.common.machine import machine_facts
    from mindrl import device

    return {**machine_facts(), "device": device.device_type(),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def record(figures: dict, bench: str, argv: Optional[List[str]] = None) -> dict:
    """One results-file line: what ran, where, when, at which commit, and its figures."""
    return {"bench": bench, "date": now_utc(), "commit": git_commit(),
            "argv": list(sys.argv[1:] if argv is None else argv), "machine": machine(),
            "figures": figures}


def append_result(path: Path, line: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def emit(figures: dict, json_out: Optional[Path] = None, results=None,
         bench: Optional[str] = None) -> None:
    """Print the figures as one JSON line; write them to `json_out`; append them with the
    machine, date and commit to the results file (`results`, else $MINDRL_BENCH_RESULTS).
    `bench` names the bench where its figures carry no "bench" key."""
    line = json.dumps(figures)
    print(line, flush=True)
    if json_out is not None:
        json_out.write_text(line + "\n")
    name = bench or figures.get("bench")
    path = results_file(results, name)
    if path is not None:
        append_result(path, record(figures, name))


# ---------------------------------------------------------------------------- the reader

def read_results(paths: Iterable[Path]) -> List[dict]:
    """Every line of the given .jsonl files (directories: their *.jsonl), in file order."""
    lines = []
    for path in paths:
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        for file in files:
            for number, text in enumerate(file.read_text().splitlines(), 1):
                if not text.strip():
                    continue
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"{file}:{number}: not a JSON line ({exc})") from None
    return lines


def newest_per_bench(lines: Iterable[dict]) -> Dict[str, dict]:
    """The latest-dated line of each bench (of equal dates, the one read last), by bench name."""
    newest: Dict[str, dict] = {}
    for line in lines:
        kept = newest.get(line["bench"])
        if kept is None or line["date"] >= kept["date"]:
            newest[line["bench"]] = line
    return dict(sorted(newest.items()))


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def figure_cell(figures: dict) -> str:
    """The scalar figures (numbers, flags, names) as `key value` pairs; nested ones left out."""
    return "; ".join(f"{key} {_value(value)}" for key, value in figures.items()
                     if key != "bench" and (value is None or isinstance(value, (int, float, str))))


def machine_cell(machine: dict) -> str:
    device = machine.get("device")
    where = machine.get("cpu_model") or "unknown CPU"
    load = machine.get("load_avg_1m")
    return (f"{where}, {machine.get('cpus_allowed')} cores"
            + (f", {device}" if device and device != "cpu" else "")
            + (f", load {load:g}" if load is not None else ""))


def arguments_cell(argv: List[str]) -> str:
    """The command line, less where its line was written (--results)."""
    shown, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--results="):
            skip = False
            continue
        skip = arg == "--results"
        if not skip:
            shown.append(arg)
    return " ".join(shown)


def markdown_table(newest: Dict[str, dict]) -> str:
    rows = ["| bench | figures | machine | date | commit | arguments |",
            "|---|---|---|---|---|---|"]
    for name, line in newest.items():
        cells = [name, figure_cell(line["figures"]), machine_cell(line.get("machine", {})),
                 line["date"], line.get("commit") or "", arguments_cell(line.get("argv") or [])]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="the newest result line of every bench, as a "
                                             "markdown table")
    ap.add_argument("paths", nargs="*", type=Path, default=[RESULTS_DIR],
                    help="results files or directories of them (default bench/results)")
    args = ap.parse_args(argv)
    print(markdown_table(newest_per_bench(read_results(args.paths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
