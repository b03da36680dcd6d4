"""The shipped agent recipes (ReTool on Qwen2.5-7B and Qwen3-8B with the python tool, Search-R1
on Qwen2.5-7B with search) run two GRPO steps each in miniature (`+scale_down`), through the
CLI as a user runs them, all three at once: their layouts on logical CPU slots, the tiny model
of their family with the char_tools tokenizer and the char tool format, their tools, turns,
verifiers and sandbox mode, search over the shipped tiny corpus. Each run's metrics carry the
agent keys and its folder the episode traces.

The python tool's strict sandbox refuses a machine where one of its layers cannot be set up;
so that this test passes on any machine, it asks this one (tools.sandbox.probe) and runs
`agent_config.sandbox=best_effort` only where the probe names missing layers (the runs then
say so in every tool answer).
"""

import json

import pytest

from mindrl.config import load_recipe, local_cluster, make_plan
from mindrl.config.scale_down import with_cpu_slots

from support.grpo_runs import finite, metrics, train_together

pytestmark = pytest.mark.slow   # see tests/conftest.py

# recipe, divisor, engines: every TP of the three is 4 (inference TP1 for Search-R1), so
# scale_down=4 runs each at TP1: the 7Bs on 2 slots (DP2; Search-R1's reference in the actor's
# processes, its 8 TP1 engines shrunk to 2), Qwen3-8B on 4 (DP4, 4 engines).
MINIATURES = [("retool_qwen25_7b", 4, 2), ("retool_qwen3_8b", 4, 4),
              ("search_r1_qwen25_7b", 4, 2)]
AGENT_KEYS = ("agent/turns_mean", "agent/call_rate", "tools/worker_restarts")


def sandbox_overrides() -> list:
    """best_effort where this machine cannot set up every sandbox layer, else nothing."""
    from mindrl.tools import sandbox

    return ["agent_config.sandbox=best_effort"] if sandbox.missing_layers(sandbox.probe()) \
        else []


def test_agent_recipes_run_two_steps_in_miniature(work):
    extra = sandbox_overrides()
    runs, engines = {}, {}
    for recipe, divisor, expected in MINIATURES:
        mini = load_recipe(recipe, [f"+scale_down={divisor}", *extra])
        assert mini.agent_config.tools and mini.agent_config.format == "char"
        assert mini.prepare.tokenizer == "char_tools"
        assert mini.agent_config.max_tool_response_tokens < \
            mini.generate_config.sampling_config.max_tokens
        engines[recipe] = (make_plan(mini, with_cpu_slots(local_cluster(), mini), [])
                           ["rollout"]["instances"], expected)
        runs[work / "runs" / recipe] = ("--config-name", recipe, f"+scale_down={divisor}",
                                        "megatron_training.train_iters=2",
                                        "rl_config.save_freq=2", *extra)
    train_together(work, runs, timeout=900)
    for run_dir in runs:
        recipe = run_dir.name
        rows = [r for r in metrics(run_dir) if r["step"] > 0]
        assert [r["step"] for r in rows] == [1, 2], recipe
        for row in rows:
            for key in AGENT_KEYS + ("actor/pg_loss", "critic/score/mean"):
                assert finite(row.get(key)), (recipe, key, row.get(key))
            assert row["agent/turns_mean"] >= 1 and row["tools/worker_restarts"] == 0, recipe
        assert (run_dir / "episodes" / "step_000001.txt").is_file(), recipe
        started = json.loads((run_dir / "workers.json").read_text())
        assert len(started["rollout"]) == engines[recipe][0] == engines[recipe][1], recipe
