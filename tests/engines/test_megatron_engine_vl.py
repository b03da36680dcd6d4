"""The Megatron engine's own log-prob and update passes on Qwen2.5-VL samples: per-sample
`pixel_values` / `image_grid_thw` (lists in the step's Batch) ride through the DP slice, micro
batches, mini batches and the pipeline; the log-probs equal transformers' at TP2, PP2 and DP2
(each DP rank holding other samples' images), and an update trains the vision tower with the
language model."""

import pytest
import torch

from mindrl.distributed import spawn_local

from support.tiny_vl import IMAGE_PAD, prompts, tiny_vl_model
from support.vl_engine_worker import RESPONSE, run_engine, vl_batch

pytestmark = pytest.mark.slow   # see tests/conftest.py

LAYOUTS = [(2, 1), (1, 2), (1, 1)]   # on 2 ranks: TP2, PP2, DP2
IDS = ["tp2", "pp2", "dp2"]


@pytest.fixture(scope="module")
def run():
    hf = tiny_vl_model()
    samples = prompts()
    expected = []
    with torch.no_grad():
        for s in samples:
            ids = s["input_ids"].unsqueeze(0)
            extra = {"mm_token_type_ids": (ids == IMAGE_PAD).long()}
            if s["pixel_values"] is not None:
                extra.update(pixel_values=s["pixel_values"], image_grid_thw=s["image_grid_thw"])
            logp = torch.log_softmax(hf(input_ids=ids, **extra).logits[0, :-1].float(), -1)
            expected.append(logp.gather(1, ids[0, 1:, None])[-RESPONSE:, 0])
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    results = spawn_local(run_engine, 2, hf.config, state, vl_batch(samples), LAYOUTS)
    return torch.stack(expected), results


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_log_probs_equal_transformers(run, layout):
    expected, results = run
    got, rows = results[0][layout]["before"], results[0][layout]["rows"]
    diff = (got - expected[rows]).abs()
    diff[0, -1] = 0                      # masked: padding after EOS
    print(f"{layout}: max |log-prob diff| {diff.max().item():.2e}")
    assert diff.max() <= 1e-5
    for rank in results:                 # every rank of the role holds the same answer
        assert torch.equal(rank[layout]["before"], got)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_an_update_trains_the_vision_tower_with_the_model(run, layout):
    _, results = run
    res = results[0][layout]
    assert res["metrics"]["actor/grad_norm"] > 0
    assert (res["after"] - res["before"]).abs().max() > 1e-4
    # Rank 0 holds the first stage in every layout: images reached the tower in the update.
    assert res["vision_moved"] is not None and res["vision_moved"] > 1e-5
