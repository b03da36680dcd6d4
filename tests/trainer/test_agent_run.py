"""The tiny agentic recipe through the CLI, as a user runs it: multi-turn episodes with the
calculator in the synchronous loop and in bounded asynchronous GRPO with partial rollouts (a
turn cut by a weight sync continues on the new weights); the same recipe with tools=[] runs
single turn, and with an environment instead of the tools (scored by it alone, no verifiers)
multi-turn. Each run's metrics carry the agent keys, its folder the episode traces."""

import json
from pathlib import Path

import pytest

from support.grpo_runs import metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

RECIPE = ("--config-name", "grpo_tiny_agent_cpu")
SHORT = ("megatron_training.train_iters=3", "rl_config.val_freq=3",
         "rl_config.val_before_train=false", "rl_config.save_freq=3",
         "megatron_training.save_interval=3")
ASYNC = ("rl_config.async_mode=bounded", "rl_config.max_staleness=1",
         "rl_config.partial_rollout_tokens=8", "generate_config.rollout_devices=1")
# An environment instead of the tools, scored by it alone: two steps, validated at the second.
TWO_TURNS = Path(__file__).parents[1] / "support" / "environments.py"
ENVIRONMENT = ("megatron_training.train_iters=2", "rl_config.val_freq=2",
               "rl_config.val_before_train=false", "rl_config.save_freq=null",
               "megatron_training.save_interval=null", "agent_config.tools=[]",
               "agent_config.call_bonus=0", f"agent_config.environment={TWO_TURNS}:TwoTurns",
               "agent_config.reward=environment", "rl_config.rule_reward=false")


def test_the_agent_recipe_runs_sync_async_single_turn_and_with_an_environment(tmp_path):
    runs = {tmp_path / "sync": (*RECIPE, *SHORT),
            tmp_path / "async": (*RECIPE, *SHORT, *ASYNC),
            tmp_path / "single": (*RECIPE, *SHORT, "agent_config.tools=[]"),
            tmp_path / "env": (*RECIPE, *ENVIRONMENT)}
    train_together(tmp_path, runs, timeout=1200)
    for name in ("sync", "async"):
        rows = metrics(tmp_path / name)
        assert len([r for r in rows if "agent/call_rate" in r]) == 3, name
        for r in rows:
            # every response token is sampled or inserted, and only the sampled ones train
            assert r["agent/sampled_tokens_mean"] + r["agent/inserted_tokens_mean"] == \
                pytest.approx(r["response_length/mean"]), name
            assert 1 <= r["agent/turns_mean"] <= r["agent/turns_max"] <= 2, name
            assert r["agent/turns"] >= 1 and r["tools/worker_restarts"] == 0, name
        assert "val/call_rate" in rows[-1] and "val/tool_answer" in rows[-1], name
        traces = sorted((tmp_path / name / "episodes").glob("step_*.txt"))
        assert [t.name for t in traces] == [f"step_{s:06d}.txt" for s in (1, 2, 3)], name
        text = traces[-1].read_text()
        assert text.count("=== {") == 4 and "[turn 0 sampled]" in text, name
        head = json.loads(text.splitlines()[0][4:])
        assert set(head) == {"sample", "score", "label", "finish"}
    single = metrics(tmp_path / "single")
    assert len(single) == 3 and not any(k.startswith(("agent/", "tools/")) for k in single[-1])
    assert not (tmp_path / "single" / "episodes").exists()
    env = metrics(tmp_path / "env")
    assert [r["step"] for r in env] == [1, 2]
    for r in env:
        # the environment's reward is the score (0.5 a turn it saw: 0, 0.5 or 1 an episode)
        assert r["critic/score/mean"] == pytest.approx(r["agent/env_reward_mean"])
        assert 0 <= r["agent/env_reward_mean"] <= 1 and "agent/call_rate" not in r
        assert not any(k.startswith("tools/") for k in r)
    # some turns ended on their own (EOS) and were stepped; their episodes scored
    assert sum(r.get("agent/turns", 0) for r in env) > 0
    assert max(r["agent/env_reward_mean"] for r in env) > 0
    assert env[-1]["val/env_reward"] == pytest.approx(env[-1]["val/score"])
    head = json.loads((tmp_path / "env" / "episodes" / "step_000002.txt").read_text()
                      .splitlines()[0][4:])
    assert set(head) == {"sample", "score", "label", "finish", "env_reward"}
