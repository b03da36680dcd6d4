"""The shipped on-policy distillation recipes (Qwen3-1.7B-Base taught by Qwen3-8B, its teacher
inside the student's processes; and by Qwen3-32B, on devices of its own) run two steps each in
miniature (`+scale_down`), through the CLI as a user runs them, both at once: their layouts on
logical CPU slots, the tiny Qwen3 student and a tiny Qwen3 teacher over its vocabulary from
another seed (prepared on first use), distillation alone. Each step logs the distillation
metrics, finite, and the teacher's pass."""

import json

import pytest

from mindrl.config import load_recipe, local_cluster, make_plan
from mindrl.config.scale_down import with_cpu_slots

from support.grpo_runs import finite, metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

# recipe, divisor, the teacher's placement: (its devices, shared with the actor, hosted by the
# actor's processes). Every TP of the 8B teacher's recipe is 1: /8 runs it on 2 slots; the 32B
# teacher's TP4 becomes 1 at /4, on 2 slots of its own beside the student's 2.
MINIATURES = [("opd_qwen3_8b_to_1p7b", 8, ([0, 1], ["actor"], "actor")),
              ("opd_qwen3_32b_to_1p7b", 4, ([2, 3], [], None))]
DISTILL_KEYS = ("actor/distill_loss", "distill/reverse_kl_mean", "distill/reverse_kl_p90",
                "distill/teacher_log_prob_mean", "distill/student_log_prob_mean")


def test_distill_recipes_run_two_steps_in_miniature(work):
    runs, placed = {}, {}
    for recipe, divisor, expected in MINIATURES:
        mini = load_recipe(recipe, [f"+scale_down={divisor}"])
        teacher = make_plan(mini, with_cpu_slots(local_cluster(), mini), [])["roles"]["teacher"]
        placed[recipe] = ((teacher["devices"], teacher["shares_with"], teacher["host"]),
                          expected)
        runs[work / "runs" / recipe] = ("--config-name", recipe, f"+scale_down={divisor}",
                                        "megatron_training.train_iters=2",
                                        "rl_config.save_freq=null",
                                        "megatron_training.save_interval=null")
    train_together(work, runs, timeout=900)
    for run_dir in runs:
        recipe = run_dir.name
        assert placed[recipe][0] == placed[recipe][1], recipe
        rows = [r for r in metrics(run_dir) if r["step"] > 0]
        assert [r["step"] for r in rows] == [1, 2], recipe
        for row in rows:
            for key in DISTILL_KEYS:
                assert finite(row.get(key)), (recipe, key, row.get(key))
            assert row["timing_s/teacher"] > 0, recipe
        started = json.loads((run_dir / "workers.json").read_text())   # role -> pid per rank
        hosted = placed[recipe][1][2] == "actor"    # the teacher in the actor's processes
        assert (started["teacher"] == started["actor"]) == hosted, (recipe, started)
        assert hosted or not set(started["teacher"]) & set(started["actor"]), recipe
    assert (work / "models" / "tiny-qwen3-teacher-mcore").is_dir()
