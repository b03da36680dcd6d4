#!/usr/bin/env python
"""GRPO training entry point: compose a configs/rlxf recipe, validate it, plan or train.

  python cli/train_grpo.py                                   # grpo_tiny_max_cpu (make demo)
  python cli/train_grpo.py --config-name r1_zero_qwen25_7b +dry_run=true
  python cli/train_grpo.py --config-name grpo_tiny_cpu rl_config.kl_coef=0 +dry_run=true

Without --config-name it runs DEFAULT_RECIPE, the tiny model learning max(a,b)= and answering
pairs it never trained on; grpo_tiny_cpu (SMOKE_RECIPE, a+b= over 0..3) is the small run the
tests and scripts name.

Exit codes: 0 trained (or plan printed); 1 invalid recipe (every problem is listed with its
key); 3 a worker died or training failed; 4 a phase of the step (generate, log-prob passes,
reward-model scoring, update, weight sync, save) passed rl_config.phase_timeout_s. On 3 (a
death) and 4 the run directory holds failure_report.txt: the phase, the step, who did not
answer and on which node, and every live worker's Python stack. Ctrl-C exits 130 and SIGTERM
(a scheduler's cancel) 143, each after shutting Ray down; the last complete checkpoint stays.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout works uninstalled

from mindrl import startup  # noqa: E402

startup.defer_full_collections()     # until the workers are up (GRPOTrainer.fit)

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from mindrl.config import (ConfigError, format_plan, local_cluster, make_plan,  # noqa: E402
                           validate, validate_lenient)
from mindrl.config.compose import DEFAULT_RECIPE, recipe_dir  # noqa: E402
from mindrl.config.scale_down import with_cpu_slots  # noqa: E402

EXIT_INVALID = 1
EXIT_FAILED = 3
EXIT_TIMEOUT = 4
EXIT_INTERRUPTED = 130          # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143           # SIGTERM (128 + SIGTERM)


def print_device_notices(run_cfg) -> None:
    """Once, before training: recipe values vLLM's CPU build overrides (config/cpu_notice.py)."""
    from mindrl import device
    from mindrl.config.cpu_notice import cpu_notices

    if device.vllm_build().overrides_recipe_settings:
        for line in cpu_notices(run_cfg):
            print(f"notice: {line}")


def cluster_for_run():
    """The Ray cluster RAY_ADDRESS names (its nodes by id), else this machine."""
    import os

    address = os.environ.get("RAY_ADDRESS")
    if not address:
        return local_cluster()
    from mindrl.workers.ray_cluster import read_ray_cluster

    return read_ray_cluster(address)


def run(cfg: DictConfig, recipe: str) -> int:
    from mindrl.workers.node_versions import NodeVersionError

    try:
        cluster = cluster_for_run()
    except ConnectionError as e:
        print(f"cannot reach the cluster: {e}", file=sys.stderr)
        return EXIT_INVALID
    except NodeVersionError as e:
        print(f"cannot use the cluster: {e}", file=sys.stderr)
        return EXIT_INVALID
    try:
        if cfg.get("dry_run", False):
            run_cfg, warnings = validate_lenient(cfg, cluster, recipe=recipe)
            if cfg.get("scale_down"):   # devices become logical CPU slots
                cluster = with_cpu_slots(cluster, run_cfg)
            print(format_plan(make_plan(run_cfg, cluster, warnings)))
            return 0
        # Shapes and batches first; then make what `prepare` asks for; then the paths.
        run_cfg = validate(cfg, cluster, check_paths=False, recipe=recipe)
        from mindrl.trainer.prepare import prepare_artifacts

        for line in prepare_artifacts(run_cfg):
            print(f"prepared {line}")
        run_cfg = validate(cfg, cluster, check_paths=True, recipe=recipe)
        print_device_notices(run_cfg)
        from mindrl.trainer.launch import preflight

        preflight(run_cfg)
    except ConfigError as e:
        print(f"invalid recipe {recipe}: {e}", file=sys.stderr)
        return EXIT_INVALID
    except ValueError as e:   # bad input files: named with row and fix by their readers
        print(f"cannot start {recipe}: {e}", file=sys.stderr)
        return EXIT_INVALID
    from mindrl.trainer.launch import train
    from mindrl.errors import PhaseTimeout, Terminated, WorkerDied

    try:
        train(run_cfg)
    except PhaseTimeout as e:
        print(f"training stopped: {e}", file=sys.stderr)
        return EXIT_TIMEOUT
    except WorkerDied as e:
        print(f"training stopped: {e}", file=sys.stderr)
        return EXIT_FAILED
    except RuntimeError as e:   # a phase failed on a worker or engine (e.g. a verified sync)
        print(f"training failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as e:     # input the run meets at start-up: data rows, what to resume
        print(f"cannot run {recipe}: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted: Ray shut down; the last complete checkpoint is intact",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("terminated (SIGTERM): Ray shut down; the last complete checkpoint is intact",
              file=sys.stderr)
        return EXIT_TERMINATED
    return 0


def refuse_bad_overrides(argv) -> list:
    """Exit 1 naming the key and its fix when the recipe or an override cannot be composed
    (an absent key: its `+` or its right spelling), before Hydra refuses it less helpfully;
    else `argv` as Hydra is to read it: a `+key=value` whose key the recipe holds becomes
    `++key=value` (config/compose.compose_with_overrides), so both spellings set it."""
    from mindrl.config.cli_args import recipe_and_overrides, with_overrides
    from mindrl.config.compose import compose_with_overrides

    named = recipe_and_overrides(argv, DEFAULT_RECIPE)
    if named is None:
        return list(argv)
    try:
        _, taken = compose_with_overrides(*named)
    except ConfigError as e:
        print(f"invalid recipe {named[0]}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    return with_overrides(argv, named[1], taken)


@hydra.main(version_base="1.3", config_path=str(recipe_dir()), config_name=DEFAULT_RECIPE)
def main(cfg: DictConfig) -> None:
    raise SystemExit(run(cfg, HydraConfig.get().job.config_name))


if __name__ == "__main__":
    sys.argv[1:] = refuse_bad_overrides(sys.argv[1:])
    main()
