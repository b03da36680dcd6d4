"""A weight sync with experts split over expert-parallel ranks: an EP2 actor (TP1, DP2, 4 of
tiny-qwen3-moe's 8 experts a layer on each rank) gathers each layer's experts over the EP group
and syncs into a vLLM TP1, verified per expert (fingerprints through vLLM's MoE kernel) and
against the converted HF checkpoint; vLLM's log-probs equal the actor's before and after a
step."""

import pytest
from transformers import AutoModelForCausalLM

from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local

from support.ep_worker import sync_from_ep2
from support.family_sync import converted_and_trained, sync_generate_config

PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70]]
TOL = 1e-4     # as tests/weight_sync/test_qwen3_moe_sync.py


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    spec, back, layout_dir, _ = converted_and_trained(tmp_path_factory.mktemp("ep_sync"),
                                                      "tiny-qwen3-moe", "qwen3_moe")
    state = AutoModelForCausalLM.from_pretrained(layout_dir).state_dict()
    return spec, back, layout_dir, mapping.full_mcore_from_hf(state, spec, 1)   # at TP 1


@pytest.mark.slow
def test_vllm_follows_an_ep2_actor_every_expert_verified(dirs):
    spec, back, layout_dir, full = dirs
    run = spawn_local(sync_from_ep2, 2, spec, str(back), str(layout_dir), full, PROMPTS,
                      sync_generate_config(1))[0]
    print("EP2 -> vLLM TP1: before", run["diff_before"], "after", run["diff_after"],
          "moved", run["diff_new_vs_old"], "gathered", run["sync"].expert_gather_numel)
    assert run["sync"].tensors == 2 + 2 * (9 + 8 * 3)     # every expert reached vLLM
    # The host received the other EP rank's 4 experts x (fc1 2I x H + fc2 H x I) per layer.
    assert run["sync"].expert_gather_numel == 2 * 4 * 3 * 64 * 128
    assert run["experts_kept"] == 0      # the gathered copies are dropped after the sync
    assert run["diff_before"] <= TOL
    assert run["diff_new_vs_old"] > 0.05, "the step barely moved the model: test is weak"
    assert run["diff_after"] <= TOL
