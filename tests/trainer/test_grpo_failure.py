"""A worker or rollout engine that dies stops the driver with a non-zero exit naming it,
fast, with a failure report naming it and its node, and the last complete checkpoint stays
loadable."""

import json
import os
import re
import signal
import time

import pytest

from support.grpo_runs import start

pytestmark = pytest.mark.slow   # see tests/conftest.py


@pytest.mark.parametrize("victim, named, label", [
    ("ref", "ref rank 0 died during", "ref rank 0"),
    ("rollout", "rollout engine 0", "rollout engine 0 (actor device 0)")])
def test_a_dead_worker_or_engine_stops_the_run_naming_it(work, tmp_path, victim, named, label):
    run_dir = tmp_path / "runs" / "dies"
    # The reference in a process of its own (not the actor's), so that its death is its own.
    proc = start(work, run_dir, "megatron_training.train_iters=400", "rl_config.save_freq=2",
                 "rl_config.colocate_actor_ref=false")
    try:
        deadline = time.time() + 400
        metrics = run_dir / "metrics.jsonl"
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        pid = json.loads((run_dir / "workers.json").read_text())[victim][0]
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        _, err = proc.communicate(timeout=120)
        assert time.time() - killed_at < 60
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-3000:]
    assert named in err and "died" in err, err[-3000:]
    report = (run_dir / "failure_report.txt").read_text()
    assert "cause: death" in report
    died = report.split("died:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(died) == 1 and re.fullmatch(rf"  {re.escape(label)}: pid {pid}, node "
                                           rf"[0-9a-f]{{56}} \(\S+\)", died[0]), died
    assert 'File "' in report.split("===== stack of actor rank 0", 1)[1]   # live ranks' stacks
    latest = (run_dir / "latest_checkpointed_iteration.txt").read_text()
    assert (run_dir / f"iter_{int(latest):07d}" / "metadata.json").is_file()


def test_ctrl_c_and_sigterm_stop_the_run_cleanly_with_their_exit_codes(work, tmp_path):
    """Ctrl-C (SIGINT) and a scheduler's cancel (SIGTERM) to the driver, two runs at once:
    each unwinds its loop, shuts Ray down (no worker outlives it), says so, and exits 130 /
    143; its last complete checkpoint is loadable."""
    from mindrl.processes import pid_alive

    runs = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            run_dir = tmp_path / "runs" / sig.name
            runs[sig] = (run_dir, start(work, run_dir, "megatron_training.train_iters=400",
                                        "rl_config.save_freq=2", from_a_terminal=True))
            # the second starts once the first made the tiny model and data it also reads
            while runs[sig][1].poll() is None and not (run_dir / "resolved_config.json").exists():
                time.sleep(0.2)
        deadline = time.time() + 400
        for sig, (run_dir, proc) in runs.items():
            metrics = run_dir / "metrics.jsonl"
            while time.time() < deadline and proc.poll() is None and not (
                    metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
                time.sleep(0.2)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            proc.send_signal(sig)
        said = {sig: proc.communicate(timeout=120)[1] for sig, (_, proc) in runs.items()}
    finally:
        for _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    for sig, code, message in ((signal.SIGINT, 130, "interrupted: Ray shut down"),
                               (signal.SIGTERM, 143, "terminated (SIGTERM): Ray shut down")):
        run_dir, proc = runs[sig]
        assert proc.returncode == code and message in said[sig], said[sig][-3000:]
        assert "SIGTERM received" not in said[sig]        # no native stack dump
        latest = (run_dir / "latest_checkpointed_iteration.txt").read_text()
        assert (run_dir / f"iter_{int(latest):07d}" / "metadata.json").is_file()
        workers = json.loads((run_dir / "workers.json").read_text())
        pids = [p for role in workers.values() for p in role]
        gone_by = time.time() + 60
        while any(map(pid_alive, pids)) and time.time() < gone_by:
            time.sleep(0.5)
        assert not [p for p in pids if pid_alive(p)], f"a worker outlived the {sig.name}"
