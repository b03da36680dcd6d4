"""What a resume restores: the model and data position always; the optimizer state and the
RNG state as actor_config.no_load_optim / no_load_rng say, and only when the checkpoint holds
them (no_save_optim / no_save_rng leave them out). Decided before any worker loads anything,
so a missing part is a clear error, not a failure deep inside Megatron's loader.

`load:` checkpoints are the converter's (weights only, as Megatron's release checkpoints), so
these keys matter on resume, where a run's own checkpoints hold all three.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import FrozenSet, Optional, Tuple


@dataclass(frozen=True)
class ResumeParts:
    optimizer: bool
    rng: bool
    rng_reason: str = "actor_config.no_load_rng: true"   # why the RNG starts fresh

    def describe(self) -> str:
        reasons = {"optim": "actor_config.no_load_optim: true", "rng": self.rng_reason}
        skipped = [f"{part} ({reasons[key]})"
                   for part, key, on in (("optimizer state", "optim", self.optimizer),
                                         ("RNG state", "rng", self.rng)) if not on]
        loaded = ["model", "data position"] + [p for p, on in (("optimizer state", self.optimizer),
                                                               ("RNG state", self.rng)) if on]
        return ", ".join(loaded) + (f"; fresh {', '.join(skipped)}" if skipped else "")


# An optimizer's keys: `optimizer.` one optimizer; `chained_<i>.optimizer.` the dense and the
# expert optimizers Megatron chains at expert parallelism > 1.
_OPTIMIZER_KEY = re.compile(r"(chained_\d+\.)?optimizer\.")


def held_parts(ckpt_dir) -> FrozenSet[str]:
    """{"optimizer", "rng"}, those the checkpoint holds (from its DCP metadata's keys)."""
    from mindrl.ckpt.safe_metadata import load_metadata

    keys = load_metadata(Path(ckpt_dir) / ".metadata").state_dict_metadata
    held = set()
    for key in keys:
        if _OPTIMIZER_KEY.match(key):
            held.add("optimizer")
        elif key.startswith("rng_state"):
            held.add("rng")
    return frozenset(held)


def resume_parts(held: FrozenSet[str], no_load_optim: bool, no_load_rng: bool,
                 ckpt_dir: str) -> ResumeParts:
    """The parts to load; asking for one the checkpoint lacks fails naming the keys."""
    for part, key in (("optimizer", "optim"), ("rng", "rng")):
        wanted = not (no_load_optim if part == "optimizer" else no_load_rng)
        if wanted and part not in held:
            raise ValueError(
                f"{ckpt_dir} was saved without its {part} state (actor_config.no_save_{key}: "
                f"true); set actor_config.no_load_{key}: true to resume with a fresh one, or "
                f"start in a new run directory")
    return ResumeParts(optimizer=not no_load_optim, rng=not no_load_rng)


@dataclass(frozen=True)
class ResumePlan:
    """The checkpoint a run resumes from and what of it loads, with what changed since."""

    iteration: int
    ckpt_dir: Path
    parts: ResumeParts
    lines: Tuple[str, ...] = ()      # layout / recipe changes, said once at resume


def plan_resume(run, save_dir) -> Optional[ResumePlan]:
    """The latest complete checkpoint in `save_dir` (None: a fresh run), decided before any
    worker starts, so a part the checkpoint lacks or a layout it cannot load fails fast."""
    from mindrl.ckpt.training.megatron_checkpoint import iteration_dir, latest_iteration
    from mindrl.ckpt.training.resume_check import check_resume

    iteration = latest_iteration(save_dir)
    if iteration is None or iteration == 0:
        return None
    ckpt, cfg = iteration_dir(save_dir, iteration), run.actor_config
    parts = resume_parts(held_parts(ckpt), cfg.no_load_optim, cfg.no_load_rng, str(ckpt))
    found = check_resume(ckpt, run, parts.optimizer, parts.rng)   # layout, recipe
    if parts.rng and not found.load_rng:
        parts = dataclasses.replace(parts, rng=False, rng_reason="the parallel layout changed")
    return ResumePlan(iteration, Path(ckpt), parts, tuple(found.lines))
