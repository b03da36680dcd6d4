"""bench/common/results.py: a bench's final line lands in its results file with the machine, the
date and the commit; the reader keeps the newest line of each bench and prints it as a table."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from bench.common import results
from support import run_env

ROOT = Path(__file__).resolve().parents[2]


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_emit_prints_the_line_and_appends_it_with_machine_date_and_commit(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    figures = {"bench": "toy", "ratio_to_floor": 1.25, "nested": {"a": 1}}
    results.emit(figures, json_out=tmp_path / "toy.json", results=tmp_path / "out")
    results.emit({**figures, "ratio_to_floor": 1.5}, results=tmp_path / "out")
    printed = capsys.readouterr().out.splitlines()
    assert [json.loads(p) for p in printed] == [figures, {**figures, "ratio_to_floor": 1.5}]
    assert json.loads((tmp_path / "toy.json").read_text()) == figures

    lines = [json.loads(t) for t in (tmp_path / "out" / "toy.jsonl").read_text().splitlines()]
    assert len(lines) == 2                                     # appended, not rewritten
    first = lines[0]
    assert first["bench"] == "toy" and first["figures"] == figures
    assert lines[1]["figures"]["ratio_to_floor"] == 1.5
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["date"])
    assert first["commit"] in (_head(), _head() + "-dirty")
    machine = first["machine"]
    assert machine["torch"] == torch.__version__ and machine["device"] == "cpu"
    assert machine["cpu_count"] >= machine["cpus_allowed"] >= 1 and machine["load_avg_1m"] >= 0
    assert {"cpu_model", "avx512f", "avx512_bf16", "amx"} <= set(machine)
    assert isinstance(first["argv"], list)


def test_the_results_place_a_file_a_directory_the_environment_or_nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    assert results.results_file(None, "e2e") is None
    assert results.results_file(tmp_path / "mine.jsonl", "e2e") == tmp_path / "mine.jsonl"
    assert results.results_file(tmp_path, "e2e") == tmp_path / "e2e.jsonl"
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "env"))
    assert results.results_file(None, "e2e") == tmp_path / "env" / "e2e.jsonl"
    # a bench whose figures carry no "bench" key names itself (bench_e2e's headline)
    results.emit({"speedup_vs_trl": 3.6}, bench="e2e")
    line = json.loads((tmp_path / "env" / "e2e.jsonl").read_text())
    assert line["bench"] == "e2e" and line["figures"] == {"speedup_vs_trl": 3.6}


def _line(bench, date, **figures):
    return {"bench": bench, "date": date, "commit": "abc",
            "argv": ["--tiny", "--results", "bench/results/", "--results=x"],
            "machine": {"cpu_model": "CPU X", "cpus_allowed": 2, "device": "cpu",
                        "load_avg_1m": 1.5},
            "figures": {"bench": bench, **figures}}


def test_the_reader_keeps_the_newest_line_of_each_bench():
    lines = [_line("reshard", "2026-11-20T10:00:00Z", ratio_to_floor=1.9),
             _line("reshard", "2026-11-27T08:00:00Z", ratio_to_floor=1.4),
             _line("reshard", "2026-11-21T10:00:00Z", ratio_to_floor=2.5),
             _line("e2e", "2026-11-01T00:00:00Z", speedup_vs_trl=3.0),
             _line("e2e", "2026-11-01T00:00:00Z", speedup_vs_trl=3.6)]   # same date: later
    newest = results.newest_per_bench(lines)
    assert list(newest) == ["e2e", "reshard"]
    assert newest["reshard"]["figures"]["ratio_to_floor"] == 1.4
    assert newest["e2e"]["figures"]["speedup_vs_trl"] == 3.6


def test_the_table_shows_scalar_figures_machine_date_and_commit(tmp_path, capsys):
    (tmp_path / "reshard.jsonl").write_text(
        json.dumps(_line("reshard", "2026-11-20T10:00:00Z", ratio_to_floor=1.9)) + "\n\n"
        + json.dumps(_line("reshard", "2026-11-27T08:00:00Z", ratio_to_floor=1.43219,
                           runs=[{"x": 1}], ok=True, mode="a|b")) + "\n")
    (tmp_path / "rewards.jsonl").write_text(
        json.dumps(_line("rewards", "2026-11-27T09:00:00Z", serial_jobs_per_s=123456.7)) + "\n")
    assert results.main([str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "| bench | figures | machine | date | commit | arguments |"
    assert rows[2] == ("| reshard | ratio_to_floor 1.432; ok True; mode a\\|b | CPU X, 2 cores, "
                       "load 1.5 | 2026-11-27T08:00:00Z | abc | --tiny |")
    assert rows[3].startswith("| rewards | serial_jobs_per_s 1.235e+05 |")
    assert len(rows) == 4


def test_a_broken_line_names_its_file_and_line(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps(_line("x", "2026-01-01T00:00:00Z")) + "\n{\n")
    with pytest.raises(SystemExit, match=r"x\.jsonl:2: not a JSON line"):
        results.read_results([tmp_path])


def test_a_bench_run_appends_its_figures(tmp_path):
    """bench_rewards at a tiny size, end to end: --results receives the line it prints."""
    proc = subprocess.run(
        [run_env.python(), str(ROOT / "bench" / "bench_rewards.py"), "--jobs", "40", "--workers",
         "1", "--repeats", "1", "--results", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in run_env.for_a_run().items() if k != results.RESULTS_ENV},
             "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    line = json.loads((tmp_path / "rewards.jsonl").read_text())
    assert line["figures"] == printed and printed["jobs"] == 40
    assert printed["serial_jobs_per_s"] > 0 and printed["pool_jobs_per_s_1"] > 0
    assert line["argv"][:2] == ["--jobs", "40"] and line["commit"].startswith(_head())
