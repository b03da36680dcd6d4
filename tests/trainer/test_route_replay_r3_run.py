"""Routing replay r3 through the CLI: two steps of grpo_tiny_moe_cpu where the engines return
their routes (engines/vllm_routes.py) and every Megatron pass replays them: the trainer's
routes equal the engine's for every token (moe/route_agreement 1.0) and vLLM's log-probs stay
at the dense model's level. The same in the asynchronous loop (one_step, the engine on a CPU
slot of its own): step 2 trains on samples one version old and replays the routes of the
weights that generated them. The two runs go at once, each with its own Ray cluster."""

import pytest

from support.grpo_runs import finite, metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py


R3_RUN = ("--config-name", "grpo_tiny_moe_cpu", "rl_config.router_replay=r3",
          "megatron_training.train_iters=2", "rl_config.save_freq=2",
          # 16 samples a step; two updates a step, so the old-log-prob pass runs and records
          # the trainer's routes.
          "megatron_training.global_batch_size=4", "rl_config.n_samples_per_prompt=4",
          "rl_config.mini_batch_size=2")
ASYNC = ("+rl_config.async_mode=one_step", "+generate_config.rollout_devices=1",
         "rl_config.colocate_actor_ref=true", "rl_config.dynamic_sampling=false",
         "rl_config.val_before_train=false", "rl_config.val_freq=null")


@pytest.fixture(scope="module")
def runs(work):
    dirs = {"sync": work / "runs" / "moe_r3", "one_step": work / "runs" / "moe_r3_async"}
    train_together(work, {dirs["sync"]: R3_RUN, dirs["one_step"]: (*R3_RUN, *ASYNC)})
    return {name: [r for r in metrics(d) if r["step"] > 0] for name, d in dirs.items()}


def test_r3_in_the_asynchronous_loop_replays_the_routes_of_stale_samples(runs):
    rows = runs["one_step"]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["rollout/staleness_max"] == 1.0      # generated on the weights before
    for row in rows:
        assert row["moe/route_agreement"] == 1.0
        assert row["moe/route_replay_s"] > 0 and finite(row["actor/pg_loss"])
    # step 1 is on-policy: vLLM's log-probs are the actor's (step 2's come from older weights)
    assert rows[0]["rollout/logprob_diff_max"] < 1e-4


def test_r3_replays_the_engine_routes_in_every_pass(runs):
    rows = runs["sync"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        print({k: row[k] for k in ("moe/route_agreement", "moe/route_replay_share",
                                   "timing_s/gen", "timing_s/step")})
        assert row["moe/route_agreement"] == 1.0
        assert 0 < row["moe/route_replay_share"] < 0.5
        assert finite(row["actor/pg_loss"])
        assert row["rollout/logprob_diff_max"] < 1e-4
