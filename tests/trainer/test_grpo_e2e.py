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


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(NON_DETERMINISTIC)}
            for r in rows if r["step"] > 0]


@pytest.fixture(scope="module")
def straight(work):
    run_dir = work / "runs" / "straight"
    train(work, run_dir, "megatron_training.train_iters=4", "rl_config.save_freq=2")
    return _deterministic(metrics(run_dir))


def test_rerun_resumes_and_matches_an_uninterrupted_run(work, straight):
    resumed = work / "runs" / "resumed"
    train(work, resumed, "megatron_training.train_iters=2", "rl_config.save_freq=2")
    train(work, resumed, "megatron_training.train_iters=4", "rl_config.save_freq=2")
    got = _deterministic(metrics(resumed))
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    assert got == straight


def test_offloading_training_state_during_generation_changes_nothing(work, straight):
    run_dir = work / "runs" / "offload"
    train(work, run_dir, "megatron_training.train_iters=4", "rl_config.save_freq=2",
          "generate_config.offload_train_param=true", "generate_config.offload_train_grad=true",
          "generate_config.offload_train_optimizer=true")
    assert _deterministic(metrics(run_dir)) == straight


def test_overlapped_passes_give_the_same_run(work):
    """blocking=false runs the old-logprob and reference passes concurrently; with two
    updates per step (mini batch 8 of 16 prompts) both passes run."""
    runs = {}
    for blocking in ("true", "false"):
        run_dir = work / "runs" / f"blocking_{blocking}"
        train(work, run_dir, "megatron_training.train_iters=2", "rl_config.save_freq=2",
              "rl_config.mini_batch_size=8", f"rl_config.blocking={blocking}",
              "rl_config.val_data_path=null")
        runs[blocking] = _deterministic(metrics(run_dir))
    assert runs["true"] == runs["false"]
    assert all(r["actor/pg_clipfrac"] >= 0 for r in runs["false"])


def test_trains_from_a_preprocessed_indexed_dataset(work):
    """examples/data's tiny recipe -> Megatron indexed prompts -> the trainer reads token ids."""
    import subprocess
    import sys

    from grpo_runs import REPO

    prefix = work / "data" / "tiny_arith" / "data"
    subprocess.run([sys.executable, str(REPO / "cli" / "preprocess_data.py"), "--config",
                    "tiny_arith", "--input", str(REPO / "examples/data/sample/tiny_arith.jsonl"),
                    "--tokenizer-name-or-path", "char",   # the tiny model's vocabulary
                    "--output-prefix", str(prefix), "--no-progress"], check=True, cwd=str(work))
    run_dir = work / "runs" / "indexed"
    train(work, run_dir, "megatron_training.train_iters=2", "rl_config.save_freq=2",
          f"megatron_training.data_path={prefix}", "rl_config.val_data_path=null")
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["prompt_length/max"] <= 4   # "a+b=" with the `empty` template, char tokens


def test_dynamic_sampling_fills_the_batch_with_informative_groups(work):
    run_dir = work / "runs" / "dapo"
    train(work, run_dir, "megatron_training.train_iters=3", "rl_config.save_freq=3",
          "rl_config.dynamic_sampling=true", "rl_config.max_gen_rounds=4",
          "rl_config.val_data_path=null")
    for row in metrics(run_dir):
        rounds = row["dynamic_sampling/rounds"]
        informative = row["dynamic_sampling/informative_groups"]
        assert 1 <= rounds <= 4
        assert informative >= 16 or rounds == 4   # full batch, or the round limit was hit
        assert 0.0 <= row["dynamic_sampling/raw_score_mean"] <= 1.0
