"""The embedded CPU default learns on any machine: a shortened grpo_tiny_cpu (same settings,
fewer steps) on three seeds.

One fp32 run is bit-identical on one machine but not across CPU makes, so a single curve
proves little: seeds stand in for the machines we cannot choose. Each seed must gain on its
own and the mean must clear the bar; a broken advantage sign, a frozen policy or a weight
sync that never reaches vLLM leaves every seed flat. The message carries each seed's figures.
"""

from grpo_runs import metrics, train

from mindrl.trainer.learning_curve import summarize_curve

SEEDS = (1, 2, 3)
STEPS = 200
EDGE = 40            # steps averaged at each end of the curve
SEED_GAIN = 0.3      # every seed: last-40 mean score minus first-40
MEAN_GAIN = 0.45     # over the seeds


def policy_score(row: dict) -> float:
    return row.get("dynamic_sampling/raw_score_mean", row["critic/score/mean"])


def test_tiny_recipe_reward_rises_on_every_seed(tmp_path):
    summaries = {}
    for seed in SEEDS:
        run_dir = tmp_path / "runs" / f"seed{seed}"
        train(tmp_path, run_dir, f"megatron_training.seed={seed}",
              f"megatron_training.train_iters={STEPS}", f"rl_config.save_freq={STEPS}")
        rows = [row for row in metrics(run_dir) if row["step"] > 0]
        assert len(rows) == STEPS
        summaries[seed] = summarize_curve([policy_score(r) for r in rows], edge=EDGE)
    report = "\n".join(f"seed {seed}: {s.describe()}" for seed, s in summaries.items())
    gains = [s.gain for s in summaries.values()]
    assert min(gains) >= SEED_GAIN, f"a seed gained less than {SEED_GAIN}:\n{report}"
    assert sum(gains) / len(gains) >= MEAN_GAIN, f"mean gain below {MEAN_GAIN}:\n{report}"
