"""A weight sync with whole experts split over the TP ranks: a TP2 + SP actor at expert TP 1
and EP 2 (4 of tiny-qwen3-moe's 8 experts a layer whole on each TP rank; MindSpeed-RL's
moe_tp_extend_ep) syncs into a vLLM TP1, each expert sent once from the rank that holds it,
whole, and verified per expert (fingerprints through vLLM's MoE kernel) and against the
converted HF checkpoint, over the shared-memory bucket and the collective transport; vLLM's
log-probs equal the actor's before and after a step."""

import pytest

from mindrl.distributed import spawn_local

from support.etp_worker import sync_from_etp
from support.family_sync import converted_and_trained, sync_generate_config

PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70]]
TOL = 1e-4     # as tests/weight_sync/test_ep_sync.py


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    spec, back, layout_dir, full = converted_and_trained(tmp_path_factory.mktemp("etp_sync"),
                                                         "tiny-qwen3-moe", "qwen3_moe")
    return spec, back, layout_dir, full       # full: at TP 2


@pytest.mark.slow
def test_vllm_follows_whole_experts_over_the_tp_ranks_every_expert_verified(dirs):
    spec, back, layout_dir, full = dirs
    run = spawn_local(sync_from_etp, 2, spec, str(back), str(layout_dir), full, PROMPTS,
                      sync_generate_config(1), (2, 1, 2, "alltoall"))[0]
    print("TP2 expert-TP1 EP2 -> vLLM TP1: before", run["diff_before"], "after",
          run["diff_after"], "collective", run["diff_collective"], "moved",
          run["diff_new_vs_old"], "gathered", run["sync"].expert_gather_numel)
    assert run["sync"].tensors == 2 + 2 * (9 + 8 * 3)     # every expert reached vLLM
    # The host (TP rank 0) received TP rank 1's 4 whole experts x (fc1 2I x H + fc2 H x I)
    # per layer, once: not TP shards (half that) nor a second copy.
    assert run["sync"].expert_gather_numel == 2 * 4 * 3 * 64 * 128
    assert run["sync"].transport != "collective" == run["sync_collective"].transport
    assert run["experts_kept"] == 0      # the gathered copies are dropped after the sync
    assert run["diff_before"] <= TOL
    assert run["diff_new_vs_old"] > 0.05, "the step barely moved the model: test is weak"
    assert run["diff_after"] <= TOL and run["diff_collective"] <= TOL
