"""Qwen3-MoE into vLLM's CPU build: a tiny Qwen3-MoE converted HF -> Megatron -> HF loads in
vLLM; a TP2 (sequence parallel) Megatron engine syncs other weights into a TP1 and a TP2 vLLM
engine (verified: fingerprints that read every expert through vLLM's MoE kernel), and vLLM's
sampled log-probs equal Megatron's before and after an optimizer step. The plan never splits
one layer's experts over two buckets."""

import pytest

from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local
from mindrl.weight_sync.plan import plan_buckets, plan_units

from support.family_sync import converted_and_trained, sync_generate_config
from support.reshard_worker import sync_one_layout

PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70]]
TOL = 1e-4
BUCKET_MB = 0.1          # the sync's bucket in support/reshard_worker.py: below one layer's experts


def test_a_layers_experts_share_one_bucket_however_small():
    spec = load_model_spec("tiny-qwen3-moe")
    units = plan_units(spec, 1)
    experts = {}
    for unit in units:
        if ".mlp.experts." in unit.rule.mcore:
            experts.setdefault(unit.layer, []).append(unit)
    assert sorted(experts) == [0, 1]
    per_layer = 8 * 3 * 64 * 128            # 8 experts, gate + up + down of 64 x 128
    assert all(sum(u.numel for u in us) == per_layer for us in experts.values())
    bucket_numel = int(BUCKET_MB * 2**20) // 4
    assert bucket_numel < per_layer
    buckets = plan_buckets(units, bucket_numel)
    for layer, units_of_layer in experts.items():
        holding = [i for i, b in enumerate(buckets) if any(u in b for u in units_of_layer)]
        assert len(holding) == 1, f"layer {layer}'s experts are split over buckets {holding}"
        assert all(u in buckets[holding[0]] for u in units_of_layer)
    assert len({u.module for us in experts.values() for u in us}) == 2   # one module a layer


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return converted_and_trained(tmp_path_factory.mktemp("qwen3_moe_sync"), "tiny-qwen3-moe",
                                 "qwen3_moe")


@pytest.mark.slow
@pytest.mark.parametrize("infer_tp", [1, 2])
def test_vllm_follows_megatron_qwen3_moe_at_tp2(dirs, infer_tp):
    spec, back, layout_dir, full = dirs
    run = spawn_local(sync_one_layout, 2, spec, str(back), str(layout_dir), full, (2, 1),
                      PROMPTS, sync_generate_config(infer_tp))[0]
    print(f"qwen3-moe vLLM TP{infer_tp} vs Megatron: before step", run["diff_before"], "after",
          run["diff_after"], "rescored", run["diff_rescored_vs_new"])
    # HF tensors: embedding, final norm; per layer 2 norms, q, k, v, q/k norms, o, router
    # and 8 experts' gate, up, down
    assert run["sync"].tensors == 2 + 2 * (9 + 8 * 3)
    assert run["tokens"] > 0
    assert run["diff_before"] <= TOL
    assert run["diff_new_vs_old"] > 0.05, "the step barely moved the model: test is weak"
    assert run["diff_rescored_vs_new"] <= TOL and run["diff_after"] <= TOL
