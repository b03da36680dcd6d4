"""End to end through Ray: Megatron actor (TP2) + vLLM rollout + resharding + reference +
rule reward, driven by cli/train_grpo.py; then kill-free resume equality."""

import pytest

from grpo_runs import REQUIRED_KEYS, finite, metrics, train

NON_DETERMINISTIC = ("timing_s/", "perf/", "val/")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("work")


def test_tp2_actor_with_reference_logs_every_metric(work):
    run_dir = work / "runs" / "tp2"
    train(work, run_dir, "megatron_training.train_iters=3", "rl_config.save_freq=3",
          "+actor_config.tensor_model_parallel_size=2", "rl_config.actor_resource.num_cpus=2",
          "rl_config.colocate_actor_ref=true")
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert set(rows[0]) == {"step", "val/score", "val/arith"}   # val_before_train
    assert "val/score" in rows[3]                                  # and at the last step
    for row in rows[1:]:
        missing = [k for k in REQUIRED_KEYS if k not in row]
        assert not missing, missing
        assert all(finite(row[k]) for k in REQUIRED_KEYS)
        # vLLM's sampled log-probs vs the TP2 actor's on the same tokens (fp32).
        assert row["rollout/logprob_diff_max"] < 1e-4
        assert row["actor/lr"] == pytest.approx(1e-3)
    assert (run_dir / "reward_curve.png").stat().st_size > 0
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "iter_0000003").is_dir()
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == "3"


def test_rerun_resumes_and_matches_an_uninterrupted_run(work):
    straight, resumed = work / "runs" / "straight", work / "runs" / "resumed"
    common = ("rl_config.save_freq=2",)
    train(work, straight, "megatron_training.train_iters=4", *common)
    train(work, resumed, "megatron_training.train_iters=2", *common)
    train(work, resumed, "megatron_training.train_iters=4", *common)
    a = [r for r in metrics(straight) if r["step"] > 0]
    b = [r for r in metrics(resumed) if r["step"] > 0]
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        det_x = {k: v for k, v in x.items() if not k.startswith(NON_DETERMINISTIC)}
        det_y = {k: v for k, v in y.items() if not k.startswith(NON_DETERMINISTIC)}
        assert det_x == det_y, x["step"]
