"""`make test`'s runner (support/suite.py): its phases in a row, stopping at the first that
fails, under one set of preload servers that every phase sees and that end with it."""

import os
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).parent / "support" / "suite.py"


def _suite(*commands, **env):
    return subprocess.run([sys.executable, str(SUITE), *commands], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_phases_run_in_a_row_until_one_fails_and_its_status_is_the_suite_s(tmp_path):
    seen = tmp_path / "seen"
    proc = _suite(f"echo one >> {seen}", f"echo two >> {seen}; exit 3",
                  f"echo three >> {seen}", MINDRL_PRELOAD="0")
    assert proc.returncode == 3
    assert seen.read_text().split() == ["one", "two"]
    assert _suite("true", "true", MINDRL_PRELOAD="0").returncode == 0


def test_every_phase_sees_the_same_servers_and_the_session_environment(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRANSFORMERS_OFFLINE", "MINDRL_PRELOAD_DIR", "MINDRL_PRELOAD")}
    seen = tmp_path / "seen"
    line = f'echo "$MINDRL_PRELOAD_DIR $TRANSFORMERS_OFFLINE" >> {seen}; test -x "$MINDRL_PRELOAD_DIR/python"'
    proc = subprocess.run([sys.executable, str(SUITE), line, line], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = seen.read_text().splitlines()
    assert first == second and first.endswith(" 1")     # session_env's TRANSFORMERS_OFFLINE
    directory = Path(first.split()[0])
    assert not directory.exists()                        # no plain start: nothing kept
    # the servers ended with the suite
    left = subprocess.run(["pgrep", "-f", f"mindrl.platforms.preload .* {directory}"],
                          capture_output=True, text=True)
    assert left.stdout == "", left.stdout
