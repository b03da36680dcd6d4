"""The Megatron engine's own log-prob and update passes on Qwen2.5-VL samples: per-sample
`pixel_values` / `image_grid_thw` (lists in the step's Batch) ride through the DP slice, micro
batches, mini batches and the pipeline; the log-probs equal transformers' at TP2, PP2 and DP2
(each DP rank holding other samples' images), and an update trains the vision tower with the
language model. A response holding `<|image_pad|>` and
`<|vision_start|>` is text on both sides: log-probs still equal transformers' (features in the
prompt's slots only), no exception."""

import pytest
import torch

from mindrl.distributed import spawn_local

from support.tiny_vl import IMAGE_PAD, VISION_START, prompts, tiny_vl_model
from support.vl_engine_worker import RESPONSE, run_engine, vl_batch

pytestmark = pytest.mark.slow   # see tests/conftest.py

# On 2 ranks: TP2, PP2, DP2; then packed rows by a token budget (several samples, each with
# its own images and M-RoPE positions, in one row): TP2 with sequence parallel, PP2, DP2.
LAYOUTS = [(2, 1), (1, 2), (1, 1), (2, 1, 4096), (1, 2, 40), (1, 1, 4096)]
IDS = ["tp2", "pp2", "dp2", "tp2-sp-packed", "pp2-packed", "dp2-packed"]


def hf_response_log_probs(hf, sample):
    """transformers' log-probs of the sample's response with image features in the prompt's
    `<|image_pad|>` slots only: a pad (or vision_start) the policy sampled is text, as vLLM
    treats generated tokens (HF's own forward would count it as an image slot and fail)."""
    ids = sample["input_ids"].unsqueeze(0)
    slots = (ids == IMAGE_PAD)
    slots[:, ids.shape[1] - RESPONSE:] = False
    embeds = hf.model.get_input_embeddings()(ids)
    if sample["pixel_values"] is not None:
        features = hf.model.visual(sample["pixel_values"],
                                   grid_thw=sample["image_grid_thw"]).pooler_output
        embeds = embeds.masked_scatter(slots.unsqueeze(-1), features)
    positions, _ = hf.model.get_rope_index(ids, slots.long(),
                                           image_grid_thw=sample["image_grid_thw"])
    logits = hf(inputs_embeds=embeds, position_ids=positions).logits
    logp = torch.log_softmax(logits[0, :-1].float(), -1)
    return logp.gather(1, ids[0, 1:, None])[-RESPONSE:, 0]


@pytest.fixture(scope="module")
def run():
    hf = tiny_vl_model()
    samples = prompts()
    # The two-image sample's response holds an image pad and a vision start (sampled tokens).
    samples[2]["input_ids"][-3], samples[2]["input_ids"][-2] = IMAGE_PAD, VISION_START
    with torch.no_grad():
        plain = samples[1]    # HF's own forward, where it applies: no pad in the response
        extra = {"mm_token_type_ids": (plain["input_ids"] == IMAGE_PAD).long().unsqueeze(0),
                 "pixel_values": plain["pixel_values"], "image_grid_thw": plain["image_grid_thw"]}
        own = hf(input_ids=plain["input_ids"].unsqueeze(0), **extra).logits[0, :-1].float()
        own = torch.log_softmax(own, -1).gather(1, plain["input_ids"][1:, None])[-RESPONSE:, 0]
        expected = torch.stack([hf_response_log_probs(hf, s) for s in samples])
    assert (own - expected[1]).abs().max() < 1e-5       # the reference is HF's forward
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    results = spawn_local(run_engine, 2, hf.config, state, vl_batch(samples), LAYOUTS)
    return expected, results


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
    # ...and the tower's seconds (forward and backward) are counted for its share of the update.
    assert res["metrics"]["actor/vision_tower_s"] > 0
