"""Every shipped multi-device recipe runs two GRPO steps in miniature (`+scale_down`): the
same TP/PP/DP and infer-TP ratios on logical CPU slots, the tiny model and task, the recipe's
own flags (sequence parallel, colocation, offload, KL loss, verifiers), through the CLI as a
user runs it. The plan's engine count is the count started."""

import json
import math

import pytest

from mindrl.config import load_recipe, local_cluster, make_plan
from mindrl.config.scale_down import with_cpu_slots

from support.grpo_runs import finite, metrics, train

pytestmark = pytest.mark.slow   # see tests/conftest.py

# recipe, divisor, engines: the 7B R1-Zero keeps TP2 (sequence parallel) and inference TP2; the
# 32B ones go to TP1 so that their 2 stages x 2 replicas and 4 engines fit beside the others in
# time. The VL recipes run the tiny Qwen2.5-VL on the image task (images through vLLM, the
# actor and the reference; validation on held-out images first, as the recipes do). The Qwen3
# ones run tiny-qwen3: grpo_qwen3_8b's inference TP1 stays 1, so its 16 engines become 8 (actor
# TP1 x PP2 x DP4 and the reference beside it); dapo_qwen3_32b runs TP1 x PP2, 2 engines, with
# DAPO's overlong penalty and dynamic sampling on.
MINIATURES = [("r1_zero_qwen25_7b", 2, 4), ("r1_zero_qwen25_32b", 8, 4),
              ("grpo_qwen25_7b", 2, 4), ("grpo_qwen25vl_7b_geo3k", 4, 2),
              ("grpo_qwen25vl_32b_geo3k", 8, 4), ("grpo_qwen3_8b", 2, 8),
              ("dapo_qwen3_32b", 8, 2)]


@pytest.mark.parametrize("recipe, divisor, expected_engines", MINIATURES)
def test_recipe_runs_two_steps_in_miniature(work, recipe, divisor, expected_engines):
    run_dir = work / "runs" / recipe
    mini = load_recipe(recipe, [f"+scale_down={divisor}"])
    engines = make_plan(mini, with_cpu_slots(local_cluster(), mini), [])["rollout"]["instances"]
    train(work, run_dir, "--config-name", recipe, f"+scale_down={divisor}",
          "megatron_training.train_iters=2", timeout=1200)
    rows = [r for r in metrics(run_dir) if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean",
                    "timing_s/reshard", "timing_s/gen"):
            assert finite(row[key]), (key, row.get(key))
        # The synced weights are the actor's: vLLM samples what the actor scores (fp32). With
        # top_p < 1 vLLM's log-probs are renormalised over the nucleus (mass >= top_p), so
        # they sit at most -log(top_p) above the actor's (0.01005 at geometry3k's 0.99).
        top_p = mini.generate_config.sampling_config.top_p
        assert row["rollout/logprob_diff_max"] < -math.log(top_p) + 1e-4
        if mini.models["actor"].vision is not None:    # every prompt carried its image
            assert row["vision/image_tokens/mean"] == 4 and row["actor/vision_tower_s"] > 0
    if mini.models["actor"].vision is not None:        # validated before training, as set
        assert any("val/score" in r for r in metrics(run_dir) if r["step"] == 0)
    started = json.loads((run_dir / "workers.json").read_text())
    assert len(started["rollout"]) == engines == expected_engines
    assert (run_dir / "iter_0000002" / "metadata.json").is_file()
