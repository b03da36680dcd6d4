"""The tiny agent learns to use its tool, on three seeds: grpo_tiny_agent_cpu from random init
finds the calculator call by chance (an empty <tool_call></tool_call>, 1-3% of the samples in
the first 10 steps) and within 45 steps calls it in nearly every sampled episode, and greedy
on the held-out prompts for at least two of the seeds (passed at 45 steps: 122 s). At 60
steps (2026-12-07, AMD EPYC AVX-512, 2 cores, the three seeds at once, 137 s): sampled call
rate 0.02 / 0.01 / 0.03 -> 0.99 / 0.99 / 0.97; greedy held-out call rate 0.00 -> 0.00 / 1.00 /
1.00. A broken episode (no answer inserted, a call never parsed), a call bonus that never
reaches the score, or a weight sync that never reaches vLLM leaves every seed near 0.

What it does not show yet: copying the tool's answer. Measured (2026-12-07, AMD EPYC with
AVX-512, 2 cores): seeds 1234 at lr 1e-3 and 3e-3, operands up to 999 and 499, 200-300 steps:
the call rate reaches 0.9-1.0 in 30-60 steps every time, the answer turn then copies digits
from the prompt rather than the tool's answer and held-out exact accuracy stays 0.0 (the
shaped digit score 0.05-0.17). The issue's bar for held-out accuracy (>= 0.5) is not met, so
this test holds the part that is learnt."""

import pytest
import torch

from bench.common.machine import cpu_model
from support.grpo_runs import metrics, train_seeds

pytestmark = pytest.mark.slow   # see tests/conftest.py

RECIPE = "grpo_tiny_agent_cpu"
SEEDS = (1, 2, 3)
STEPS = 45
EDGE = 10            # steps averaged at the end of the curve
CALL_RATE = 0.8      # every seed: sampled call rate over the last EDGE steps, and greedy held-out


def test_the_tiny_agent_learns_to_call_its_tool_on_every_seed(work, tmp_path):
    run_dirs = train_seeds(work, tmp_path / "runs", RECIPE, SEEDS, STEPS,
                           f"rl_config.val_freq={STEPS}", "agent_config.traces_per_step=1",
                           timeout=1500)
    figures = {}
    for seed in SEEDS:
        rows = metrics(run_dirs[seed])
        steps = [r for r in rows if "agent/call_rate" in r]
        assert len(steps) == STEPS
        first = sum(r["agent/call_rate"] for r in steps[:EDGE]) / EDGE
        last = sum(r["agent/call_rate"] for r in steps[-EDGE:]) / EDGE
        val = [r for r in rows if "val/call_rate" in r]
        assert val[0]["step"] == 0 and val[-1]["step"] == STEPS
        figures[seed] = (first, last, val[0]["val/call_rate"], val[-1]["val/call_rate"],
                         val[-1]["val/tool_answer"])
    cpu = f"{cpu_model()}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"
    report = f"on {cpu}:\n" + "\n".join(
        f"seed {s}: call rate {a:.2f} (first {EDGE}) -> {b:.2f} (last {EDGE}); held-out greedy "
        f"call rate {c:.2f} -> {d:.2f}, exact answers {e:.2f}"
        for s, (a, b, c, d, e) in figures.items())
    assert all(f[0] < 0.2 and f[2] < 0.2 for f in figures.values()), \
        f"a seed called its tool before it learnt to {report}"
    assert min(f[1] for f in figures.values()) >= CALL_RATE, \
        f"a seed calls its tool in fewer than {CALL_RATE:.0%} of its episodes {report}"
    # Greedy decoding calls only once the call is the most likely first move: with the bonus
    # on learning samples only (entropy_tokens: learning), all 3 seeds got there in 45 steps
    # (2026-12-07: sampled 0.96 / 0.91 / 0.97 over the last 10, greedy 1.0 each); before, 2 of
    # 3 did, and one seed unlearnt the call at step 38. The bar stays at 2 of 3.
    greedy = sorted(f[3] for f in figures.values())
    assert greedy[1] >= CALL_RATE, \
        f"two seeds' greedy policies call on fewer than {CALL_RATE:.0%} of held-out prompts " \
        f"{report}"
