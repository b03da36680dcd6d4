"""Run a validated recipe: prepare artifacts, start or join Ray, train, shut down cleanly."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from mindrl.config.schema import RunConfig

# Every Ray worker of the run can dump its Python stacks on request (workers/stack_dump.py),
# so a failed run's report holds them, and starts without full garbage collections
# (workers/worker_setup.py).
WORKER_SETUP = {"worker_process_setup_hook": "mindrl.workers.worker_setup.setup"}
# Ray gives a local node's raylet 30 s to register with the GCS (hard-coded in Ray 2.60's
# node.py) and then raises; on a loaded box (load average 20 on 2 cores, measured) it can take
# longer. A start that timed out is shut down and tried again, this many times in all.
LOCAL_START_TRIES = 3
_SLOW_START = "timed out during startup"


def init_ray(num_local_devices: int) -> str:
    """Join the cluster RAY_ADDRESS names (`auto` = the one `ray start` left on this node), or
    start a private local one (several runs on one box never share a cluster by accident)."""
    import ray

    from mindrl.workers.worker_group import LOCAL_NODE_ENV

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True,
                 runtime_env=WORKER_SETUP)
        return "joined the running Ray cluster"
    for key, value in LOCAL_NODE_ENV.items():
        os.environ.setdefault(key, value)
    from mindrl import device
    from mindrl.platforms import preload

    kwargs = device.local_ray_resources(num_local_devices)
    # address="local": a new cluster even when `ray start` left one on this machine (Ray
    # would otherwise join that one).
    for attempt in range(1, LOCAL_START_TRIES + 1):
        before = _children()
        try:
            with preload.ray_node_python():    # each worker's setup step forked, where it can
                ray.init(address="local", include_dashboard=False,
                         object_store_memory=256 * 2**20, log_to_driver=True,
                         runtime_env=WORKER_SETUP, **kwargs)
            break
        except Exception as e:
            if _SLOW_START not in str(e) or attempt == LOCAL_START_TRIES:
                raise
            _end(_children() - before)   # the half-started node's GCS, raylet and agents
            print(f"Ray's local start timed out (try {attempt} of {LOCAL_START_TRIES}: "
                  f"the machine is busy); starting it again", flush=True)
    return "started a local Ray cluster"


def _children() -> set:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _end(pids: set) -> None:
    """Kill these processes (a failed start's; Ray never handed them to a node to stop)."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
            procs[-1].kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def preflight(run: RunConfig) -> None:
    """Read the inputs a step needs (prompt rows) before Ray or any worker starts; a bad row
    raises ValueError naming the file, the row and the fix."""
    from mindrl.data.indexed import load_prompt_rows

    for path in (run.megatron_training.data_path, run.rl_config.val_data_path):
        if path:
            try:
                load_prompt_rows(path)
            except FileNotFoundError as e:
                raise ValueError(str(e)) from None
    if "reward" in run.active_roles:
        check_reward_tokenizer(run)
    if "teacher" in run.active_roles:
        check_teacher_tokenizer(run)
    check_loads(run)


def check_loads(run: RunConfig) -> None:
    """Each role's `load` holds the model its recipe builds (the checkpoint's
    mindrl_model.json), so a wrong checkpoint is refused before Ray starts rather than by
    every rank once it has."""
    from mindrl.ckpt.mcore_io import (McoreCheckpointError, read_model_info,
                                      resolve_checkpoint_dir, spec_differences)
    from mindrl.config.names import role_key

    for role in run.active_roles:
        cfg, spec = run.role(role), run.models.get(role)
        if cfg.load is None or spec is None:
            continue
        key = role_key(run, role, "load")
        try:
            saved = read_model_info(resolve_checkpoint_dir(cfg.load)).spec
        except McoreCheckpointError as e:
            raise ValueError(f"{key}={cfg.load}: {e}. Fix: convert the HF checkpoint with "
                             f"examples/ckpt (or cli/convert_ckpt.py) and point {key} at its "
                             f"output, or set it to null for a random start") from None
        wrong = spec_differences(saved, spec, cfg.tensor_model_parallel_size)
        if wrong:
            raise ValueError(f"{key}={cfg.load} holds {saved.name}, not the recipe's model "
                             f"{spec.name}: {'; '.join(wrong)}. Fix: point {key} at a "
                             f"conversion of {spec.name}, or pick the recipe's model "
                             f"(model=NAME, configs/model) that the checkpoint holds")


def check_reward_tokenizer(run: RunConfig) -> None:
    """The reward model reads the actor's token ids: its tokenizer must be the actor's."""
    actor, reward = (run.actor_config.tokenizer_name_or_path,
                     run.reward_config.tokenizer_name_or_path)
    if reward == actor:
        return
    from mindrl.models.tokenizers import load_tokenizer

    if load_tokenizer(reward).get_vocab() != load_tokenizer(actor).get_vocab():
        raise ValueError(f"reward_config.tokenizer_name_or_path={reward} is not the actor's "
                         f"tokenizer ({actor}): the reward model scores the actor's token ids, "
                         f"so it needs the same vocabulary; use a reward model trained on it")


def check_teacher_tokenizer(run: RunConfig) -> None:
    """The teacher scores the student's token ids: its tokenizer must be the actor's (the
    same vocabulary; config/checks/distill.py compares the models' sizes before this)."""
    actor, teacher = (run.actor_config.tokenizer_name_or_path,
                      run.role("teacher").tokenizer_name_or_path)
    if teacher == actor:
        return
    from mindrl.models.tokenizers import load_tokenizer

    if load_tokenizer(teacher).get_vocab() != load_tokenizer(actor).get_vocab():
        raise ValueError(f"teacher_config.tokenizer_name_or_path={teacher} is not the student's "
                         f"tokenizer (actor_config: {actor}): the teacher scores the student's "
                         f"token ids, so it needs the same vocabulary; use a teacher trained "
                         f"with the student's tokenizer")


def write_resolved_config(run: RunConfig, run_dir: Path) -> Path:
    path = run_dir / "resolved_config.json"
    path.write_text(json.dumps(asdict(run), indent=2, default=str))
    return path


def train(run: RunConfig, log: Callable[[str], None] = print) -> list:
    import ray

    from mindrl.trainer.grpo_trainer import GRPOTrainer

    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log(f"run directory: {run_dir}")
    write_resolved_config(run, run_dir)
    from mindrl.config.placement import devices_required

    log(init_ray(devices_required(run)))
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # After ray.init, whose own handler would exit at once with a native stack dump that
    # reads like a crash.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return GRPOTrainer(run, log=log).fit()   # its source follows rl_config.async_mode
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        ray.shutdown()


def _terminated(signum, frame):
    from mindrl.errors import Terminated

    raise Terminated()
