"""Expert parallelism through the path a user takes: grpo_tiny_moe_cpu run by the CLI on two
actor ranks (the alltoall dispatcher), at EP 2 for two steps (each rank holding 4 of the 8
experts a layer), its checkpoint then resumed at EP 1 for a third, against three steps at EP 1
(data parallel 2) uninterrupted. Everything a step logs is the same run: the same samples and
scores, losses, entropies and routing load equal, grad norms to fp32's rounding of another
reduction order; vLLM's log-probs stay those of the synced experts (every expert sent from the
rank that holds it, verified); the resume loads the dense and expert optimizers' Adam state into
one optimizer and says so.

The resume caught a defect: at EP > 1 Megatron saves the state of its chained optimizers under
`chained_<i>.optimizer.` keys, which the pre-start check did not count as an optimizer, so an
EP > 1 run could not resume with its optimizer (trainer/resume.held_parts).

Measured on the 2-core AMD EPYC (2026-11-29): the two runs together 30 s, the resume 23 s;
grad norms agreed to 4e-8, every other metric exactly."""

import json

import pytest

from support.grpo_runs import metrics, train, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

COMMON = ("--config-name", "grpo_tiny_moe_cpu",
          "megatron_training.moe_token_dispatcher_type=alltoall",
          "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2")
EXACT = ("critic/score/mean", "response_length/mean", "actor/entropy", "actor/pg_loss",
         "actor/kl_loss", "moe/tokens_per_expert_max_over_mean")


def _run(steps, ep):
    return (*COMMON, f"megatron_training.train_iters={steps}", f"rl_config.save_freq={steps}",
            f"megatron_training.expert_model_parallel_size={ep}")


def test_ep2_steps_and_a_resume_at_ep1_equal_three_steps_at_ep1(work, tmp_path):
    ep1, ep2 = tmp_path / "runs" / "ep1", tmp_path / "runs" / "ep2"
    train_together(work, {ep1: _run(3, 1), ep2: _run(2, 2)}, timeout=900)
    saved = json.loads((ep2 / "iter_0000002" / "mindrl_recipe.json").read_text())["layout"]
    assert (saved["ep"], saved["dp"]) == (2, 2)
    resumed = train(work, ep2, *_run(3, 1))
    log = resumed.stdout + resumed.stderr
    assert "resumed from" in log and "optimizer state" in log
    assert "saved at TP1 PP1 EP2 DP2 (dense and expert optimizers), loaded into one optimizer " \
           "at TP1 PP1 DP2" in log
    one, two = ([r for r in metrics(d) if r["step"] > 0] for d in (ep1, ep2))
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two):
        for key in EXACT:
            assert abs(a[key] - b[key]) <= 1e-6 * max(1.0, abs(a[key])), (a["step"], key)
        assert abs(a["actor/grad_norm"] - b["actor/grad_norm"]) <= 1e-5 * a["actor/grad_norm"]
        assert b["rollout/logprob_diff_max"] < 1e-5          # vLLM holds every synced expert
