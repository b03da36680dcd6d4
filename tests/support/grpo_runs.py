"""Run cli/train_grpo.py as a user does (a subprocess) and read back what the run left."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from mindrl.config.compose import SMOKE_RECIPE
from support import run_env

REPO = Path(__file__).resolve().parents[2]

REQUIRED_KEYS = (
    [f"timing_s/{k}" for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor",
                               "reshard", "step")]
    + [f"actor/{k}" for k in ("pg_loss", "kl_loss", "entropy", "pg_clipfrac", "ppo_kl",
                              "grad_norm", "lr")]
    + [f"critic/{g}/{s}" for g in ("score", "rewards") for s in ("mean", "max", "min")]
    + ["rewards/arith"]
    + [f"response_length/{s}" for s in ("mean", "max", "min", "clip_ratio")]
    + [f"prompt_length/{s}" for s in ("mean", "max", "min")]
    + [f"perf/{k}" for k in ("total_num_tokens", "time_per_step", "throughput")]
    + ["rollout/logprob_diff_max", "rollout/logprob_diff_mean"])


def _command(work: Path, run_dir: Path, overrides, ray_address: str = None):
    """The CLI command and its environment: a private Ray cluster (or the one `ray_address`
    names), paths under `work`; SMOKE_RECIPE (a+b=) unless the overrides start with
    `--config-name NAME`."""
    env = {**run_env.for_a_run(), "MINDRL_WORK_DIR": str(work)}
    env.pop("RAY_ADDRESS", None)
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    options = []      # Hydra's own flags go before the overrides
    overrides = list(overrides)
    while overrides and overrides[0].startswith("--"):
        options += overrides[:2]
        overrides = overrides[2:]
    if "--config-name" not in options:      # no recipe named: the smoke recipe, not the default
        options = ["--config-name", SMOKE_RECIPE, *options]
    cmd = [*_python(), str(REPO / "cli" / "train_grpo.py"), *options, f"run_dir={run_dir}",
           *overrides]
    return cmd, env


def _python():
    """`python`, or where the session's driver preload server listens (tests/conftest.py),
    `python preload/client.py SOCKET`: the same script and arguments, in a process forked with
    torch, transformers and Hydra already imported (mindrl/platforms/preload/)."""
    from mindrl.platforms import preload

    run_env.wait_for_preload()
    sock = preload.socket_path("driver")
    return [sys.executable] + ([str(preload.CLIENT), str(sock)] if sock else [])


def train(work: Path, run_dir: Path, *overrides: str, timeout: int = 900,
          ray_address: str = None):
    cmd, env = _command(work, run_dir, overrides, ray_address)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(work))
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}"
    return proc


def train_together(work: Path, runs: dict, timeout: int = 900) -> None:
    """Several runs at once ({run_dir: overrides}), each with its own Ray cluster, their output
    in files beside their run dirs (a pipe nobody reads would stall a long run). A run's
    phases wait on one another (Ray calls, vLLM's scheduler, the driver), so on 2 cores three
    small runs finish well before three in a row. The first run makes what `prepare` asks
    for; the others start once it has written its resolved config (after `prepare`)."""
    procs = {}
    for run_dir, overrides in runs.items():
        cmd, env = _command(work, run_dir, overrides)
        Path(run_dir).parent.mkdir(parents=True, exist_ok=True)
        log = open(f"{run_dir}.log", "w")
        procs[run_dir] = (cmd, log, subprocess.Popen(cmd, env=env, cwd=str(work), stdout=log,
                                                     stderr=subprocess.STDOUT, text=True))
        if len(procs) == 1:
            first = procs[run_dir][2]
            while first.poll() is None and not (Path(run_dir) / "resolved_config.json").exists():
                time.sleep(0.5)
    failed = []
    for run_dir, (cmd, log, proc) in procs.items():
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if proc.returncode != 0:
            failed.append(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                          f"{Path(f'{run_dir}.log').read_text()[-4000:]}")
    assert not failed, "\n\n".join(failed)


def train_seeds(work: Path, runs: Path, recipe: str, seeds, steps: int, *overrides: str,
                timeout: int = 1200) -> dict:
    """`recipe` for `steps` steps once per seed, all at once (train_together), the first sync
    verified and the last step saved; {seed: its run dir} (runs/seed<N>)."""
    run_dirs = {seed: Path(runs) / f"seed{seed}" for seed in seeds}
    train_together(work, {run_dirs[seed]: ("--config-name", recipe,
                                            f"megatron_training.seed={seed}",
                                            f"megatron_training.train_iters={steps}",
                                            f"rl_config.save_freq={steps}",
                                            "generate_config.verify_sync=first", *overrides)
                          for seed in seeds}, timeout=timeout)
    return run_dirs


# Exec the command with SIGINT at its default, as a terminal starts it: a suite run in the
# background starts everything with SIGINT ignored, and Python then never raises
# KeyboardInterrupt (a plain `trap - INT` cannot undo that in a non-interactive shell).
AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execv(sys.argv[1], sys.argv[1:])")


def start(work: Path, run_dir: Path, *overrides: str, stdout=subprocess.PIPE, env=None,
          from_a_terminal: bool = False):
    """The run in the background (a test that kills or watches it); stderr is piped; `env`
    adds variables; `from_a_terminal`: Ctrl-C (SIGINT) reaches it as a user's would."""
    cmd, base = _command(work, run_dir, overrides)
    if from_a_terminal:
        cmd = [sys.executable, "-c", AS_FROM_A_TERMINAL, *cmd]
    env = {**base, **(env or {})}
    return subprocess.Popen(cmd, env=env, cwd=str(work), stdout=stdout,
                            stderr=subprocess.PIPE, text=True)


def metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in open(Path(run_dir) / "metrics.jsonl")]


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def shm_files_of(run_dir: Path) -> list:
    """MindRL's /dev/shm files (mindrl/shared_memory.py's prefixes) whose creator is one of
    the run's workers (workers.json): what a run must not leave behind."""
    from mindrl.shared_memory import SHM_DIR, creator_pid

    pids = {int(pid) for ranks in json.loads((Path(run_dir) / "workers.json").read_text())
            .values() for pid in ranks if pid is not None}
    return sorted(os.path.join(SHM_DIR, name) for name in os.listdir(SHM_DIR)
                  if creator_pid(name) in pids)


def checkpoint_tensors(ckpt_dir: Path, tmp_path: Path) -> dict:
    """{name: tensor} of a Megatron checkpoint's model weights (DCP read through a torch.save
    copy under tmp_path; extra states left out)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = Path(tmp_path) / f"{ckpt_dir.parent.name}-{ckpt_dir.name}.pt"
    dcp_to_torch_save(ckpt_dir, out)
    state = torch.load(out, weights_only=False)
    return {k: v for k, v in state.items()
            if torch.is_tensor(v) and (k.startswith("embedding.") or k.startswith("decoder."))
            and not k.endswith("_extra_state")}
