"""The MoE recipes run: grpo_tiny_moe_cpu (tiny Qwen3-MoE, 8 experts, top-2, EP 1) learns the
embedded default's task on 2 cores, and dapo_qwen3_30b_a3b (expert TP 1 x EP 8 at TP4, whole
experts over the TP x EP ranks; in miniature TP1 x EP2: 4 DP ranks, 4 of the tiny model's 8
experts a layer on each, MindSpeed-RL's EP2 kept; vLLM at EP 1) runs two steps in miniature,
as does grpo_qwen3_235b_a22b (expert TP 1 x EP 8 at TP2 -> EP 4 at TP1) over a 2-stage
pipeline. Whole experts over TP ranks (TP2) run in tests/engines/test_megatron_engine_etp.py and
tests/weight_sync/test_etp_sync.py: a miniature at TP 1 has no TP ranks to spread them over.
Each logs the routing load every step, and vLLM's log-probs stay those of the synced experts.

One seed in the suite (time); the 3-seed figures measured by hand are in
docs/guides/demo.md#the-moe-default. 160 steps as the dense learning test, whose bars
(tests/trainer/test_grpo_learning.py) it keeps: gain >= 0.5, no fall beyond 0.25. Measured on a
loaded 2-core AMD EPYC (2026-11-27), seeds 1 / 2 / 3: gains 0.67 / 0.85 / 0.55, largest falls
0.06 / 0.00 / 0.03."""

import math

import pytest

from mindrl.config import load_recipe, local_cluster, make_plan
from mindrl.config.scale_down import with_cpu_slots
from mindrl.trainer.learning_curve import policy_scores, summarize_curve

from support.grpo_runs import finite, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py

STEPS, EDGE, GAIN, MAX_FALL = 160, 40, 0.5, 0.25


def _routing_and_sync_rows_ok(rows):
    for row in rows:
        assert 1.0 <= row["moe/tokens_per_expert_max_over_mean"] <= 8.0
        assert "actor/moe_aux_loss" not in row             # off by default in RL
        assert row["rollout/logprob_diff_max"] < 1e-4      # vLLM samples the synced experts


def test_tiny_moe_recipe_learns(work, tmp_path):
    run_dir = tmp_path / "runs" / "moe_seed1"
    train(work, run_dir, "--config-name", "grpo_tiny_moe_cpu", "megatron_training.seed=1",
          f"megatron_training.train_iters={STEPS}", f"rl_config.save_freq={STEPS}",
          "generate_config.verify_sync=first", timeout=1500)
    rows = [r for r in metrics(run_dir) if "critic/score/mean" in r]
    scores = policy_scores(rows)
    assert len(scores) == STEPS
    summary = summarize_curve(scores, edge=EDGE)
    assert summary.gain >= GAIN, summary.describe()
    assert summary.max_drop <= MAX_FALL, summary.describe()
    _routing_and_sync_rows_ok(rows)


def test_dapo_qwen3_30b_a3b_at_ep2_runs_two_steps_in_miniature(work):
    run_dir = work / "runs" / "dapo_qwen3_30b_a3b"
    overrides = ["+scale_down=4"]
    mini = load_recipe("dapo_qwen3_30b_a3b", overrides)
    assert mini.models["actor"].name == "tiny-qwen3-moe"
    # expert TP 1 x EP 8 at TP4 -> EP 2 at TP1: each DP rank's share of the experts kept
    assert (mini.actor_config.expert_tensor_parallel_size,
            mini.actor_config.expert_model_parallel_size) == (1, 2)
    assert (mini.generate_config.infer_expert_parallel_size, mini.generate_config
            .enable_expert_parallel) == (1, False)                # vLLM EP 1 on CPU
    assert mini.actor_config.moe_token_dispatcher_type == "alltoall"
    assert mini.rl_config.router_replay == "r3"      # the recipe replays vLLM's routes
    engines = make_plan(mini, with_cpu_slots(local_cluster(), mini), [])["rollout"]["instances"]
    train(work, run_dir, "--config-name", "dapo_qwen3_30b_a3b", *overrides,
          "megatron_training.train_iters=2", timeout=1200)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2] and engines == 4
    for row in rows:
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "timing_s/reshard"):
            assert finite(row[key]), (key, row.get(key))
        assert row["rollout/logprob_diff_max"] < -math.log(mini.generate_config.sampling_config
                                                            .top_p) + 1e-4
        # r3 at EP 2: the passes replayed the engine's routes (each rank its own tokens);
        # no old-log-prob pass runs here (one update a step), so no agreement is measured
        assert row["moe/route_replay_s"] > 0 and "moe/route_agreement" not in row
    _routing_and_sync_rows_ok(rows)


def test_grpo_qwen3_235b_a22b_at_pp16_ep4_runs_two_steps_in_miniature(work):
    # TP2 x PP16 x DP4, expert TP 1 x EP8 on 128 devices: TP -> 1 (scale_down=2) and EP8 -> 4
    # with it, the 16 stages -> the tiny model's 2 on 8-fold fewer devices, so DP4 stays (each
    # rank 2 of the 8 experts a layer, the experts of a layer on both stages' ranks); vLLM
    # TP4 -> 2 at EP 1, 4 engines.
    # Top-p, top-k and min-p off in this run: vLLM's log-probs are then the full
    # distribution's, equal to the actor's (fp32) when every synced expert is right.
    run_dir = work / "runs" / "grpo_qwen3_235b_a22b"
    overrides = ["+scale_down=2", "generate_config.sampling_config.top_p=1.0",
                 "generate_config.sampling_config.top_k=-1",
                 "generate_config.sampling_config.min_p=0.0"]
    mini = load_recipe("grpo_qwen3_235b_a22b", overrides)
    actor = mini.actor_config
    assert mini.models["actor"].name == "tiny-qwen3-moe"
    assert (actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size,
            actor.expert_model_parallel_size) == (1, 2, 4)
    assert actor.decoder_first_pipeline_num_layers is None     # the tiny layers split evenly
    assert mini.resource("actor").count == 8 and mini.rl_config.router_replay == "r3"
    engines = make_plan(mini, with_cpu_slots(local_cluster(), mini), [])["rollout"]["instances"]
    train(work, run_dir, "--config-name", "grpo_qwen3_235b_a22b", *overrides,
          "megatron_training.train_iters=2", timeout=1200)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2] and engines == 4
    for row in rows:
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean"):
            assert finite(row[key]), (key, row.get(key))
        assert row["timing_s/reshard_verify"] > 0          # every expert of both stages
        assert row["moe/route_replay_s"] > 0                # r3 at PP2 x EP4
    _routing_and_sync_rows_ok(rows)                         # log-probs within 1e-4
    assert (run_dir / "iter_0000002" / "metadata.json").is_file()
