"""Qwen3-MoE through the converter: HF -> mcore -> HF bit for bit from both spellings of the
experts (save_pretrained's per-expert tensors, a loaded model's stacked ones, in safetensors
and in a torch pickle), with a dense layer among the MoE ones, from a folder without tokenizer
files; the checkpoint records the checked TP / PP / EP, and loaded at TP1, TP2 and PP2 it gives
transformers' logits."""

import json

import pytest
import torch

from mindrl.ckpt.convert_checks import ConversionError
from mindrl.ckpt.converter import plan_hf_to_mcore, plan_mcore_to_hf
from mindrl.distributed import spawn_local

from support.ckpt_convert_worker import logits_from_checkpoints, run_conversions
from support.ckpt_hf_models import read_hf_tensors
from support.hf_reference import reference_hf_model
from support.moe_hf import moe_spec, save_stacked

pytestmark = pytest.mark.slow   # a spawned converter world (see tests/conftest.py)

SPELLINGS = ("per_expert", "stacked", "stacked_bin")
TOKENS = torch.randint(0, 128, (4, 12), generator=torch.Generator().manual_seed(2))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every spelling converted there and back in one converter world."""
    root = tmp_path_factory.mktemp("moe_convert")
    model = reference_hf_model(moe_spec(dense_layers=(1,)), seed=11)
    with torch.no_grad():
        torch.save(model(TOKENS).logits, root / "expected.pt")
    model.save_pretrained(root / "per_expert" / "hf")         # weights and config only
    save_stacked(model, root / "stacked" / "hf")
    save_stacked(model, root / "stacked_bin" / "hf", fmt="bin")
    jobs = []
    for name in SPELLINGS:
        jobs += [("hf2mg", dict(load_dir=root / name / "hf", save_dir=root / name / "mg", tp=2,
                                pp=2, ep=2, model_type_hf="qwen3-moe", add_qkv_bias=False)),
                 ("mg2hf", dict(load_dir=root / name / "mg", save_dir=root / name / "back",
                                model_type_hf="qwen3_moe"))]
    spawn_local(run_conversions, 1, jobs)
    return root


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_round_trip_is_bit_identical_per_expert(world, spelling):
    original = read_hf_tensors(world / "per_expert" / "hf")
    back = read_hf_tensors(world / spelling / "back")
    # embedding and final norm (tied); layer 0: attention and norms, router, 8 experts x 3;
    # layer 1 (dense): attention and norms, gate / up / down.
    assert sorted(back) == sorted(original) and len(original) == 2 + (8 + 1 + 3 * 8) + (8 + 3)
    assert "model.layers.0.mlp.experts.7.down_proj.weight" in back       # written per expert
    assert "model.layers.1.mlp.gate_proj.weight" in back                 # the dense layer
    for name, tensor in original.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    assert not [p.name for p in (world / spelling / "back").iterdir() if "token" in p.name]


def test_checkpoint_records_the_checked_layout_and_the_moe_block(world):
    info = json.loads((world / "per_expert" / "mg" / "release" / "mindrl_model.json").read_text())
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2,
                                          "expert_model_parallel_size": 2}]
    assert info["spec"]["moe"] == {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 64,
                                   "norm_topk_prob": True, "dense_layers": [1]}
    config = json.loads((world / "per_expert" / "back" / "config.json").read_text())
    assert config == json.loads((world / "per_expert" / "hf" / "config.json").read_text())


def test_a_folder_without_tokenizer_is_noted(world, tmp_path):
    plan = plan_hf_to_mcore(world / "per_expert" / "hf", tmp_path / "out")
    try:
        assert [n for n in plan.notes if n.startswith("no tokenizer in ")]
    finally:
        plan.weights.close()


def test_converted_checkpoint_gives_transformers_logits_at_tp_and_pp(world):
    expected = torch.load(world / "expected.pt")
    cases = [("moe", str(world / "per_expert" / "mg"), 1, [(1, 1), (2, 1), (1, 2)])]
    results = spawn_local(logits_from_checkpoints, 2, cases, TOKENS)
    got = {k: v for r in results for k, v in r.items()}
    for tp, pp in [(1, 1), (2, 1), (1, 2)]:
        logits, _ = got[("moe", tp, pp)]
        diff = (logits - expected).abs().max().item()
        assert diff <= 1e-5, f"TP{tp} PP{pp}: max |mcore - transformers| = {diff}"


def test_a_checkpoint_that_is_not_the_model_yaml_is_refused(world, tmp_path):
    with pytest.raises(ConversionError) as e:
        plan_mcore_to_hf(world / "per_expert" / "mg", tmp_path / "out", model="qwen3-30b-a3b")
    for named in ("moe.num_experts (num_experts): 8 here, 128 in the yaml",
                  "moe.router_topk (num_experts_per_tok): 2 here, 8",
                  "moe.ffn_hidden_size (moe_intermediate_size): 64 here, 768",
                  "moe.dense_layers (mlp_only_layers): (1,) here, ()", "qwen3-30b-a3b.yaml"):
        assert named in str(e.value)
    assert not (tmp_path / "out").exists()
