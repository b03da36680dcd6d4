"""Routing replay r2 through the CLI: two steps of grpo_tiny_moe_cpu, whose one update per
step would skip the old-log-prob pass, run it (r2 turns it on) and the update replays the
routes it recorded: the replay's share of the step is logged and the update's first
importance ratio is 1 (the same routes, weights and micro batches). With replay off and
rl_config.log_route_agreement, the engines' routes are compared with the trainer's."""

import pytest

from support.grpo_runs import finite, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py


def test_r2_replays_the_old_log_prob_pass_routes_in_two_steps(work):
    run_dir = work / "runs" / "moe_r2"
    train(work, run_dir, "--config-name", "grpo_tiny_moe_cpu", "rl_config.router_replay=r2",
          "megatron_training.train_iters=2", "rl_config.save_freq=2", timeout=900)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["timing_s/old_log_prob"] > 0                  # r2 ran the pass
        assert 0 < row["moe/route_replay_share"] < 0.5
        assert finite(row["actor/pg_loss"]) and finite(row["actor/grad_norm"])
        assert abs(row["actor/ppo_kl"]) < 1e-6                   # ratio 1: same routes
        assert row["rollout/logprob_diff_max"] < 1e-4


def test_the_route_agreement_is_logged_with_replay_off(work):
    """Replay off: the engines return their routes and the old-log-prob pass records the
    trainer's, every step; in fp32 on the weights vLLM just received, the two pick the same
    top-k for nearly every (token, layer) (ties aside)."""
    run_dir = work / "runs" / "moe_agreement"
    train(work, run_dir, "--config-name", "grpo_tiny_moe_cpu",
          "+rl_config.log_route_agreement=true", "megatron_training.train_iters=2",
          "rl_config.save_freq=2", timeout=900)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["timing_s/old_log_prob"] > 0                  # the pass ran
        assert 0.95 <= row["moe/route_agreement"] <= 1.0, row["moe/route_agreement"]
        assert "moe/route_replay_share" not in row or row["moe/route_replay_share"] == 0
        assert row["rollout/logprob_diff_max"] < 1e-4
