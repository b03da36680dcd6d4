"""The checks a trainer runs on a checkpoint before any worker starts to resume from it.

One call, so the trainer's resume stays a few lines: a layout change the checkpoint cannot
make is refused here (ValueError naming both layouts and the fix) instead of on every rank
inside Megatron's loader, and what changed since the save (recipe keys, layout) comes back as
lines for the log.
"""

from __future__ import annotations

from typing import List, NamedTuple

from mindrl.ckpt.training import checkpoint_recipe, layout_change
from mindrl.ckpt.training.megatron_checkpoint import saved_layout_and_format


class ResumeCheck(NamedTuple):
    lines: List[str]      # to log: recipe keys changed, layout notes
    load_rng: bool        # False when the layout changed (RNG streams are per rank)


def check_resume(ckpt_dir, run, load_optim: bool, load_rng: bool) -> ResumeCheck:
    """What to log before resuming `run` (a RunConfig) from `ckpt_dir`, and whether the RNG
    state still loads; raises ValueError when the checkpoint cannot be loaded at the run's
    layout."""
    current = checkpoint_recipe.run_recipe(run)
    saved_layout, saved_format = saved_layout_and_format(ckpt_dir)
    plan = layout_change.plan_load(saved_layout, saved_format, current["layout"], load_optim,
                                   load_rng, ckpt_dir)
    lines = (checkpoint_recipe.resume_messages(checkpoint_recipe.read_recipe(ckpt_dir), current,
                                               ckpt_dir) + list(plan.notes))
    return ResumeCheck(lines, plan.load_rng)
