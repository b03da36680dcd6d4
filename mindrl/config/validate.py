"""Does a recipe make sense, and does it fit this cluster? Checked once, before any worker.

The rules live in config/checks/, one module a concern; this module runs them in order on a
parsed recipe. Every problem names its dotted key, the value and the fix. Problems that
depend on the machine (cluster size, device kind, paths) carry a category so that plan mode
can report them as warnings while still refusing recipes that are wrong everywhere.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from mindrl.config.checks.agent import check_agent
from mindrl.config.checks.algorithm import check_algorithm
from mindrl.config.checks.asynchronous import check_async
from mindrl.config.checks.batch import check_batches
from mindrl.config.checks.dapo import check_dapo
from mindrl.config.checks.distill import check_distill
from mindrl.config.checks.dtype import check_bf16
from mindrl.config.checks.lora import check_lora
from mindrl.config.checks.moe import check_moe
from mindrl.config.checks.packing import check_packing
from mindrl.config.checks.parallelism import check_parallelism
from mindrl.config.checks.paths import check_paths
from mindrl.config.checks.ported import check_ported
from mindrl.config.checks.replay import check_replay
from mindrl.config.checks.resources import check_resources
from mindrl.config.checks.reward import check_reward
from mindrl.config.checks.roles import check_roles
from mindrl.config.checks.sizes import check_positive
from mindrl.config.cluster import ClusterResources, local_cluster
from mindrl.config.errors import MACHINE_DEPENDENT, ConfigError, Problem, dedupe
from mindrl.config.parse import parse
from mindrl.config.scale_down import scale_down, with_cpu_slots
from mindrl.config.schema import RunConfig


def find_problems(run: RunConfig, cluster: ClusterResources, *,
                  paths: bool = False) -> list[Problem]:
    """Every consistency, cluster and (optionally) path problem of a parsed recipe."""
    out = check_positive(run)
    if out:  # zero sizes would make the divisibility checks misleading
        return out
    out += check_parallelism(run)
    out += check_resources(run, cluster)
    out += check_batches(run)
    out += check_algorithm(run)
    out += check_async(run)
    out += check_packing(run)
    out += check_ported(run)
    out += check_dapo(run)
    out += check_roles(run, cluster)
    out += check_bf16(run, cluster)
    out += check_moe(run, cluster)
    out += check_replay(run)
    out += check_reward(run)
    out += check_distill(run)
    out += check_lora(run)
    out += check_agent(run)
    if paths:
        out += check_paths(run)
    return dedupe(out)


def check(raw: Any, cluster: Optional[ClusterResources] = None, *, check_paths: bool = False,
          recipe: Optional[str] = None) -> tuple[RunConfig, list[Problem]]:
    """Parse (raising ConfigError on shape problems) and list the remaining problems. A
    recipe scaled down (`+scale_down=D`, mindrl/config/scale_down.py) on a CPU cluster gets as
    many logical CPU slots as it needs."""
    scaled = scale_down(raw)
    run = parse(scaled, recipe=recipe)
    cluster = cluster or local_cluster()
    if scaled is not raw:
        cluster = with_cpu_slots(cluster, run)
    return run, find_problems(run, cluster, paths=check_paths)


def validate(raw: Any, cluster: Optional[ClusterResources] = None, *,
             check_paths: bool = False, recipe: Optional[str] = None) -> RunConfig:
    """The typed recipe, or one ConfigError listing every problem."""
    run, _ = validate_lenient(raw, cluster, check_paths=check_paths, recipe=recipe,
                              warn_only=())
    return run


def validate_lenient(raw: Any, cluster: Optional[ClusterResources] = None, *,
                     check_paths: bool = True, recipe: Optional[str] = None,
                     warn_only: Iterable[str] = MACHINE_DEPENDENT
                     ) -> tuple[RunConfig, list[Problem]]:
    """RunConfig plus the problems demoted to warnings (categories in warn_only: by default
    cluster and path problems, for plan mode); any other problem raises one ConfigError."""
    run, problems = check(raw, cluster, check_paths=check_paths, recipe=recipe)
    warn_only = set(warn_only)
    fatal = [p for p in problems if p.category not in warn_only]
    if fatal:
        raise ConfigError(fatal)
    return run, [p for p in problems if p.category in warn_only]


