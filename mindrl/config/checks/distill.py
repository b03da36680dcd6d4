"""On-policy distillation's keys against the teacher role: a loss and an estimator that are
built, a coefficient >= 0, and a teacher that can score the student's tokens (its own trained
weights, the student's vocabulary, the same inputs). Part of validate.py's checks (one job:
rl_config.distill_* and teacher_config)."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig
from mindrl.config.structure import suggest

NOT_BUILT = {"forward_kl_topk": "not built yet: use reverse_kl (the teacher's top-k "
                                "tokens need its logits, not one log-prob per token)"}


def check_distill(run: RunConfig) -> list[Problem]:
    """The distill_* keys name what is built; with distillation on, the teacher is another
    model than the student's start, over the student's vocabulary."""
    rl = run.rl_config
    out: list[Problem] = []
    if rl.distill_loss in NOT_BUILT:
        out.append(Problem("rl_config.distill_loss", f"is {NOT_BUILT[rl.distill_loss]}",
                           "set rl_config.distill_loss: reverse_kl", rl.distill_loss))
    elif rl.distill_loss is not None and rl.distill_loss not in names.DISTILL_LOSSES:
        out.append(Problem("rl_config.distill_loss", "is not a distillation loss (null: off)",
                           suggest(rl.distill_loss, names.DISTILL_LOSSES), rl.distill_loss))
    if rl.distill_estimator not in names.DISTILL_ESTIMATORS:
        out.append(Problem("rl_config.distill_estimator", "is not a per-token KL estimator "
                           f"({', '.join(names.DISTILL_ESTIMATORS)})",
                           suggest(rl.distill_estimator, names.DISTILL_ESTIMATORS),
                           rl.distill_estimator))
    if not rl.distill_coef >= 0:
        out.append(Problem("rl_config.distill_coef", "must not be negative (a negative weight "
                           "would push the student away from the teacher)", "use e.g. 1.0",
                           rl.distill_coef))
    if rl.skip_zero_advantage_updates and rl.distill_loss is not None:
        out.append(Problem("rl_config.skip_zero_advantage_updates", "is true with a "
                           "distillation term, which teaches on every sample whatever the "
                           "advantages", "set it false (or rl_config.distill_loss: null)", True))
    if "teacher" in run.active_roles:
        out += _teacher(run)
    return out


def _teacher(run: RunConfig) -> list[Problem]:
    """Trained weights of its own, the actor's vocabulary, and images only with the actor."""
    out: list[Problem] = []
    teacher, actor = run.models.get("teacher"), run.models.get("actor")
    load = run.role("teacher").load
    if load is None:
        out.append(Problem("teacher_config.load", "is not set: distillation needs a teacher "
                           "with trained weights", "point teacher_config.load at a converted "
                           "checkpoint of the teacher (cli/convert_ckpt.py), or set "
                           "rl_config.distill_loss: null", None))
    elif load == run.actor_config.load:
        out.append(Problem(names.role_key(run, "teacher", "load"), "is the actor's checkpoint: "
                           "the teacher would be the student's own start, with nothing to "
                           "teach", "set teacher_config.load to the teacher's checkpoint",
                           load))
    if teacher is None or actor is None:
        return out
    if teacher.vocab_size != actor.vocab_size:
        out.append(Problem(names.role_key(run, "teacher", "model"), f"is {teacher.name}, "
                           f"with a vocabulary of {teacher.vocab_size} tokens, but the "
                           f"student (actor) {actor.name} has {actor.vocab_size}: the teacher "
                           f"scores the student's token ids, so both need one tokenizer",
                           "pick a teacher model trained with the student's tokenizer",
                           teacher.name))
    if (teacher.vision is None) != (actor.vision is None):
        seen = "sees" if teacher.vision is not None else "does not see"
        out.append(Problem(names.role_key(run, "teacher", "model"), f"is {teacher.name}, which "
                           f"{seen} images, unlike the student {actor.name}", "pick a teacher "
                           "of the student's kind (both vision-language, or both text)",
                           teacher.name))
    return out
