"""Qwen3 into vLLM's CPU build: a tiny Qwen3 converted HF -> Megatron -> HF loads in vLLM, a
TP2 Megatron engine syncs other weights into it (verified: fingerprints), and vLLM's sampled
log-probs equal Megatron's, before and after an optimizer step."""

import pytest

from mindrl.distributed import spawn_local

from support.family_sync import converted_and_trained, sync_generate_config
from support.reshard_worker import sync_one_layout

pytestmark = pytest.mark.slow   # see tests/conftest.py

PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70]]
TOL = 1e-4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3_sync")
    spec, back, layout_dir, full = converted_and_trained(root, "tiny-qwen3", "qwen3")
    return spawn_local(sync_one_layout, 2, spec, str(back), str(layout_dir), full,
                       (2, 1), PROMPTS, sync_generate_config())[0]


def test_vllm_follows_megatron_qwen3_at_tp2(run):
    print("qwen3 vLLM vs Megatron: before step", run["diff_before"], "after",
          run["diff_after"], "rescored", run["diff_rescored_vs_new"])
    assert run["sync"].tensors == 2 + 2 * 11       # q/k norms included, tied embedding
    assert run["tokens"] > 0
    assert run["diff_before"] <= TOL
    assert run["diff_new_vs_old"] > 0.05, "the step barely moved the model: test is weak"
    assert run["diff_rescored_vs_new"] <= TOL and run["diff_after"] <= TOL
