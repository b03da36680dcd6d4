"""The embedded CPU default learns: a shortened run of grpo_tiny_cpu (same settings, fewer
steps) raises the mean reward by a clear margin."""

from grpo_runs import metrics, train


def test_tiny_recipe_reward_rises(tmp_path):
    run_dir = tmp_path / "runs" / "learn"
    train(tmp_path, run_dir, "megatron_training.train_iters=200", "rl_config.save_freq=200")
    rows = metrics(run_dir)
    scores = [row["critic/score/mean"] for row in rows if row["step"] > 0]
    first, last = sum(scores[:40]) / 40, sum(scores[-40:]) / 40
    assert last - first >= 0.4, f"mean score first 40 steps {first:.3f}, last 40 {last:.3f}"
    val = [row["val/score"] for row in rows if "val/score" in row]
    assert val[-1] - val[0] >= 0.5, f"greedy validation accuracy {val}"
