"""The tiny distillation recipe through the CLI, as a user runs it: the teacher (prepared on
first use, living in the actor's process) scores every step's samples, the student trains on
the distillation term alone, and the distillation metrics are logged, finite, and tell the
teacher from the student."""

import math

import pytest

from support.grpo_runs import finite, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py

RECIPE = ("--config-name", "distill_tiny_cpu")
SHORT = ("megatron_training.train_iters=2", "megatron_training.global_batch_size=4",
         "rl_config.mini_batch_size=4", "rl_config.val_freq=null", "rl_config.save_freq=null",
         "megatron_training.save_interval=null")
DISTILL_KEYS = ("distill/reverse_kl_mean", "distill/reverse_kl_p90",
                "distill/teacher_log_prob_mean", "distill/student_log_prob_mean",
                "actor/distill_loss", "timing_s/teacher")


def test_the_distillation_recipe_runs_and_logs_its_metrics(work):
    run_dir = work / "runs" / "distill"
    train(work, run_dir, *RECIPE, *SHORT)
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(finite(r[k]) for k in DISTILL_KEYS), {k: r.get(k) for k in DISTILL_KEYS}
        # the teacher is another model: its log-probs of the student's samples differ
        assert abs(r["distill/teacher_log_prob_mean"]
                   - r["distill/student_log_prob_mean"]) > 0.02
        # k3 is >= 0 per token, and > 0 where the two differ
        assert r["distill/reverse_kl_mean"] > 0 and r["actor/distill_loss"] > 0
        assert r["distill/reverse_kl_p90"] >= 0
        assert r["timing_s/teacher"] > 0 and r["timing_s/ref"] == 0.0   # no reference
        assert math.isfinite(r["critic/score/mean"])                    # scored, not trained
    # the update trained on the term: the first step's loss is the term at the student that
    # sampled (one update per step: on-policy), so the two figures agree closely
    first = rows[0]
    assert first["actor/distill_loss"] == pytest.approx(first["distill/reverse_kl_mean"],
                                                        rel=1e-3)
    assert (work / "models" / "tiny-qwen2-teacher-mcore").is_dir()
