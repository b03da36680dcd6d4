"""The tiny LoRA recipe through the CLI, as a user runs it: step 1's reference (the actor's base
with its adapters off) equals the actor (B = 0), the adapters then move the policy away from it,
the engines sample from the merged weights (every sync verified, the rollout log-probs the
actor's), and the checkpoint holds the base exactly as loaded beside the trained adapters."""

import pytest
import torch

from support.grpo_runs import checkpoint_tensors, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py

RECIPE = ("--config-name", "grpo_tiny_lora_cpu")


def test_the_lora_recipe_trains_adapters_over_its_frozen_base(work, tmp_path):
    run_dir = work / "runs" / "lora"
    train(work, run_dir, *RECIPE, "megatron_training.train_iters=3", "rl_config.save_freq=3",
          "rl_config.val_freq=null", "rl_config.val_before_train=false")
    rows = [r for r in metrics(run_dir) if "actor/kl_loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Step 1: the reference pass (adapters off) and the actor (B = 0) are the same model.
    assert rows[0]["actor/kl_loss"] <= 1e-6, rows[0]["actor/kl_loss"]
    assert rows[-1]["actor/kl_loss"] > 1e-5, rows[-1]["actor/kl_loss"]
    # The engines sampled from W + B A: their log-probs are the actor's, every step.
    assert all(r["rollout/logprob_diff_max"] < 1e-3 for r in rows), \
        [r["rollout/logprob_diff_max"] for r in rows]
    saved = checkpoint_tensors(run_dir / "iter_0000003", tmp_path)
    base = checkpoint_tensors(work / "models" / "tiny-qwen2-recall600-mcore" / "release", tmp_path)
    adapters = {k: v for k, v in saved.items() if k.rsplit(".", 1)[-1] in ("lora_a", "lora_b")}
    assert saved.keys() - adapters.keys() == base.keys()
    for name, tensor in base.items():
        assert torch.equal(saved[name], tensor), name
    # Saved stacked over the layers (Megatron's layout): 4 linear layers x (A, B), 2 layers each.
    assert len(adapters) == 4 * 2 and all(v.shape[0] == 2 for v in adapters.values())
    for name, tensor in adapters.items():
        if name.endswith("lora_b"):             # B trained away from 0 in every layer
            assert all(tensor[layer].abs().max() > 0 for layer in range(2)), name
