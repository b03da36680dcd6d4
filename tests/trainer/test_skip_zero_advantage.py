"""rl_config.skip_zero_advantage_updates through the CLI: with a verifier weighted 0 every
sample scores alike, every advantage is 0, and the run makes no update at all: each step logs
actor/update_skipped 1 and the checkpoint it saves holds exactly the weights it loaded (an
update of the KL and entropy terms alone would move them under Adam)."""

import pytest
import torch

from support.grpo_runs import checkpoint_tensors, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py


def test_a_step_whose_advantages_are_all_zero_makes_no_update(work, tmp_path):
    run_dir = work / "runs" / "skip_zero_advantage"
    train(work, run_dir, "megatron_training.train_iters=2", "rl_config.save_freq=2",
          "rl_config.verifier_weight=[0.0]", "rl_config.dynamic_sampling=false",
          "rl_config.entropy_coeff=0.01", "rl_config.val_freq=null",
          "rl_config.val_before_train=false",
          "+rl_config.skip_zero_advantage_updates=true")
    rows = [r for r in metrics(run_dir) if "critic/score/max" in r]
    assert [r["actor/update_skipped"] for r in rows] == [1.0, 1.0]
    assert all(r["critic/score/max"] == r["critic/score/min"] == 0.0 for r in rows)
    saved = checkpoint_tensors(run_dir / "iter_0000002", tmp_path)
    loaded = checkpoint_tensors(work / "models" / "tiny-qwen2-mcore" / "release", tmp_path)
    assert saved.keys() == loaded.keys() and len(saved) > 4
    for name, tensor in loaded.items():
        assert torch.equal(saved[name], tensor), name
