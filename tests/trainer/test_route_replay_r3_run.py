"""Routing replay r3 through the CLI: two steps of grpo_tiny_moe_cpu where the engines return
their routes (engines/vllm_routes.py) and every Megatron pass replays them: the trainer's
routes equal the engine's for every token (moe/route_agreement 1.0) and vLLM's log-probs stay
at the dense model's level."""

import pytest

from support.grpo_runs import finite, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py


def test_r3_replays_the_engine_routes_in_every_pass(work):
    run_dir = work / "runs" / "moe_r3"
    train(work, run_dir, "--config-name", "grpo_tiny_moe_cpu", "rl_config.router_replay=r3",
          "megatron_training.train_iters=2", "rl_config.save_freq=2",
          # 16 samples a step (the capture is a prefill per sample); two updates a step, so
          # the old-log-prob pass runs and records the trainer's routes.
          "megatron_training.global_batch_size=4", "rl_config.n_samples_per_prompt=4",
          "rl_config.mini_batch_size=2", timeout=900)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        print({k: row[k] for k in ("moe/route_agreement", "moe/route_replay_share",
                                   "timing_s/gen", "timing_s/step")})
        assert row["moe/route_agreement"] == 1.0
        assert 0 < row["moe/route_replay_share"] < 0.5
        assert finite(row["actor/pg_loss"])
        assert row["rollout/logprob_diff_max"] < 1e-4
