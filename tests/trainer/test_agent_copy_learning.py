"""The tiny agent learns its task with its tool, on three seeds, and not without it
(`make test-long`: 599 s on 2 cores, 2026-12-07, too long for `make test`).

grpo_tiny_agent_copy_cpu starts from the echo warm base (models/warm_start.py: it repeats a
tool's answer over random text; it has never seen a sum, a prompt of the task or a call
answered). RL has to learn to call the calculator and to copy its answer after the call.
Measured (2026-12-07, AMD EPYC AVX-512, 2 cores, seeds 1/2/3 at once, ~12 min): held-out
greedy exact answers 0.17 at step 0 (the base's greedy first move is a call on some prompts)
-> 1.00 / 1.00 / 1.00 at step 120 (0.92 / 1.00 / 1.00 at step 100, 0.00 / 0.94 / 0.88 at
step 80); without its tool (agent_config.tools=[]), the same base's held-out answers stay 0.
A copy that never reaches the episode (an answer not inserted, a loss mask that trains the
inserted tokens and so the answer's own digits, a sync that never reaches vLLM) leaves every
seed near its start."""

import pytest

from support.grpo_runs import metrics, train_together

pytestmark = pytest.mark.long   # see tests/conftest.py

RECIPE = "grpo_tiny_agent_copy_cpu"
SEEDS = (1, 2, 3)
STEPS = 120
EXACT = 0.8          # every seed: held-out greedy exact answers at the end, with the tool
WITHOUT = 0.05       # ... and at most this without it


def _run(seed, *extra):
    return ("--config-name", RECIPE, f"megatron_training.seed={seed}",
            f"megatron_training.train_iters={STEPS}", f"rl_config.save_freq={STEPS}",
            f"rl_config.val_freq={STEPS // 3}", "generate_config.verify_sync=first",
            "agent_config.traces_per_step=1", *extra)


def _held_out(run_dir):
    return {r["step"]: r["val/tool_answer"] for r in metrics(run_dir) if "val/tool_answer" in r}


def test_the_tiny_agent_learns_to_answer_with_its_tool_and_not_without(work, tmp_path):
    runs = {tmp_path / f"seed{s}": _run(s) for s in SEEDS}
    without = tmp_path / "without_tool"
    runs[without] = _run(2, "agent_config.tools=[]", "agent_config.call_bonus=0")
    train_together(work, runs, timeout=3000)
    curves = {s: _held_out(tmp_path / f"seed{s}") for s in SEEDS}
    off = _held_out(without)
    report = "\n".join(f"seed {s}: {c}" for s, c in curves.items()) + f"\nwithout tool: {off}"
    assert all(sorted(c) == [0, 40, 80, 120] for c in curves.values()), report
    assert all(c[120] >= EXACT for c in curves.values()), \
        f"a seed answers fewer than {EXACT:.0%} of held-out prompts with its tool:\n{report}"
    assert all(c[120] > c[0] + 0.5 for c in curves.values()), report
    assert max(off.values()) <= WITHOUT, f"the base answers without its tool:\n{report}"
