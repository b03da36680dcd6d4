"""The embedded CPU default learns: a shortened run of grpo_tiny_cpu (same settings, fewer
steps) raises the mean reward by a clear margin."""

from grpo_runs import metrics, train


def test_tiny_recipe_reward_rises(tmp_path):
    run_dir = tmp_path / "runs" / "learn"
    train(tmp_path, run_dir, "megatron_training.train_iters=200", "rl_config.save_freq=200")
    scores = [row["critic/score/mean"] for row in metrics(run_dir)]
    first, last = sum(scores[:40]) / 40, sum(scores[-40:]) / 40
    assert last - first >= 0.4, f"mean score first 40 steps {first:.3f}, last 40 {last:.3f}"
