"""Every bad input gets a clear error naming the file / tensor / flag, and nothing is written.

All of these fail in planning, before Megatron is imported, so they run in the test process.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mindrl.ckpt import converter, hf_io, mcore_io
from mindrl.ckpt.converter import ConversionError
from mindrl.staging import staged_dir

from support.ckpt_hf_models import make_hf_model, save_hf


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    save_hf(make_hf_model("qwen2", True, 2, 126), root / "qwen2")
    save_hf(make_hf_model("qwen2", True, 2, 126), root / "qwen2_sharded", max_shard_size="300KB")
    save_hf(make_hf_model("llama", False, 1, 128), root / "llama")
    return root


@pytest.fixture
def work(tmp_path, sources):
    """A fresh copy of the sources to damage, and an output path that must stay untouched."""
    shutil.copytree(sources, tmp_path / "src")
    return tmp_path / "src", tmp_path / "out" / "mg"


def _assert_nothing_written(save_dir: Path, before=None):
    if before is None:
        assert not save_dir.exists(), f"{save_dir} was created"
    else:
        assert sorted(p.name for p in save_dir.iterdir()) == before
    parent = save_dir.parent
    if parent.exists():
        assert not [p for p in parent.iterdir() if ".tmp-" in p.name], "staging dir left behind"


def _fails(match, save_dir, before=None, **kwargs):
    with pytest.raises(ConversionError, match=match):
        converter.plan_hf_to_mcore(save_dir=save_dir, **kwargs).weights.close()
    _assert_nothing_written(save_dir, before)


def _shards(d: Path):
    return sorted(d.glob("model-*.safetensors"))


def test_missing_shard_names_the_file(work):
    src, out = work
    missing = _shards(src / "qwen2_sharded")[1]
    missing.unlink()
    _fails(f"missing shard file.*{missing.name}", out, load_dir=src / "qwen2_sharded")


def test_truncated_shard_names_the_file(work):
    src, out = work
    shard = _shards(src / "qwen2_sharded")[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    _fails(f"{shard.name}.*truncated", out, load_dir=src / "qwen2_sharded")


def test_index_disagreeing_with_shards_names_the_tensor(work):
    src, out = work
    index_path = src / "qwen2_sharded" / hf_io.SAFE_INDEX
    index = json.loads(index_path.read_text())
    first, last = _shards(src / "qwen2_sharded")[0].name, _shards(src / "qwen2_sharded")[-1].name
    name = next(k for k, v in index["weight_map"].items() if v == first)
    index["weight_map"][name] = last
    index_path.write_text(json.dumps(index))
    _fails(f"tensor '{name}'", out, load_dir=src / "qwen2_sharded")


def test_config_weight_shape_mismatch_names_the_tensor(work):
    src, out = work
    config_path = src / "qwen2" / "config.json"
    config = json.loads(config_path.read_text())
    config["intermediate_size"] = 512
    config_path.write_text(json.dumps(config))
    _fails(r"model\.layers\.0\.mlp\.gate_proj\.weight.*\(256, 128\).*\(512, 128\)", out,
           load_dir=src / "qwen2")


def test_missing_tensor_names_it(work):
    src, out = work
    path = src / "qwen2" / "model.safetensors"
    tensors = load_file(path)
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, path, metadata={"format": "pt"})
    _fails(r"model\.layers\.1\.self_attn\.k_proj\.bias.*missing", out, load_dir=src / "qwen2")


def test_unexpected_tensor_is_refused(work):
    src, out = work
    path = src / "llama" / "model.safetensors"
    tensors = load_file(path)
    tensors["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(128)
    save_file(tensors, path, metadata={"format": "pt"})
    _fails(r"unexpected tensor 'model\.layers\.0\.self_attn\.o_proj\.bias'", out,
           load_dir=src / "llama")


@pytest.mark.parametrize("tp,pp,match", [
    (3, 1, "tensor-parallel-size 3 does not divide num_attention_heads=4"),
    (4, 1, r"tensor-parallel-size 4 does not divide num_query_groups"),
    (1, 3, "pipeline-parallel-size 3 does not divide num_layers=2"),
])
def test_parallel_sizes_must_divide_the_model(work, tp, pp, match):
    src, out = work
    _fails(match, out, load_dir=src / "qwen2", tp=tp, pp=pp)


def test_an_uneven_pipeline_is_checked_and_recorded(work):
    src, out = work
    # 2 layers over 2 stages: a first stage of 2 leaves the last stage none
    _fails("leave 0 for the 1 stages", out, load_dir=src / "qwen2", pp=2,
           first_stage_layers=2)
    _fails("needs pipeline_model_parallel_size >= 2", out, load_dir=src / "qwen2",
           first_stage_layers=1)
    plan = converter.plan_hf_to_mcore(src / "qwen2", out, pp=2, first_stage_layers=1,
                                      last_stage_layers=1)
    plan.weights.close()
    assert (plan.pp, plan.first_stage_layers, plan.last_stage_layers) == (2, 1, 1)


def test_tp_must_divide_query_groups_of_mqa(work):
    src, out = work
    _fails("num_query_groups", out, load_dir=src / "llama", tp=2)


def test_non_empty_save_dir_is_refused_and_kept(work):
    src, out = work
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("precious")
    _fails("not empty; pass --overwrite", out, before=["keep.txt"], load_dir=src / "qwen2")
    assert (out / "keep.txt").read_text() == "precious"


def test_save_dir_inside_load_dir_is_refused(work):
    src, _ = work
    with pytest.raises(ConversionError, match="overlaps --load-dir"):
        converter.plan_hf_to_mcore(src / "qwen2", src / "qwen2" / "mg")
    with pytest.raises(ConversionError, match="overlaps --load-dir"):
        converter.plan_hf_to_mcore(src / "qwen2", src / "qwen2", overwrite=True)


def test_unknown_architecture(work):
    src, out = work
    config_path = src / "qwen2" / "config.json"
    config = json.loads(config_path.read_text())
    config["model_type"] = "gpt2"
    config_path.write_text(json.dumps(config))
    _fails("model_type 'gpt2' is not supported", out, load_dir=src / "qwen2")
    _fails("--model-type-hf 'mistral' is not supported", out, load_dir=src / "llama",
           model_type_hf="mistral")


@pytest.mark.parametrize("model,flags,match", [
    ("llama", dict(model_type_hf="qwen2"), "use --model-type-hf llama2 or llama3 or llama"),
    ("qwen2", dict(model_type_hf="llama3"), "use --model-type-hf qwen2 or llama2"),
    ("qwen2", dict(model_type_hf="qwen2", add_qkv_bias=False), "add --add-qkv-bias"),
    ("llama", dict(model_type_hf="llama2", add_qkv_bias=True), "drop --add-qkv-bias"),
    ("qwen2", dict(params_dtype="fp8"), "--params-dtype 'fp8'"),
    ("qwen2", dict(tokenizer_model="/nonexistent/tokenizer.json"), "does not exist"),
])
def test_inconsistent_flags(work, model, flags, match):
    src, out = work
    _fails(match, out, load_dir=src / model, **flags)


def test_guide_flags_for_qwen25_are_accepted(work):
    """MindSpeed's guide converts Qwen2.5 with --model-type-hf llama2 --add-qkv-bias."""
    src, out = work
    plan = converter.plan_hf_to_mcore(src / "qwen2", out, tp=2, pp=2, model_type_hf="llama2",
                                      add_qkv_bias=True, params_dtype="bf16",
                                      tokenizer_model=str(src / "qwen2" / "tokenizer.json"))
    plan.weights.close()
    assert plan.spec.architecture == "qwen2" and plan.params_dtype == "bf16"
    assert plan.tokenizer_dir == src / "qwen2"
    _assert_nothing_written(out)


def test_missing_config_or_weights(work):
    src, out = work
    (src / "qwen2" / "config.json").unlink()
    _fails("config.json is missing", out, load_dir=src / "qwen2")
    (src / "llama" / "model.safetensors").unlink()
    _fails("no HF weights", out, load_dir=src / "llama")


class NotAWeight:
    """Pickled beside the weights: weights_only=True must refuse it."""


def test_torch_bin_weights_load_with_weights_only(work):
    src, out = work
    d = src / "llama"
    tensors = load_file(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    torch.save(tensors, d / "pytorch_model.bin")
    plan = converter.plan_hf_to_mcore(d, out)
    assert torch.equal(plan.weights.get("lm_head.weight"), tensors["lm_head.weight"])
    plan.weights.close()
    # A class only this file defines: no library can have allow-listed it (megatron.core,
    # once imported anywhere in the process, allow-lists pathlib.PosixPath, say).
    torch.save({"weights": tensors, "extra": NotAWeight()}, d / "pytorch_model.bin")
    _fails("weights_only=True", out, load_dir=d)


# ------------------------------------------------------------------ mcore side


def _mg_fails(match, load_dir, save_dir, before=None, **kwargs):
    with pytest.raises(ConversionError, match=match):
        converter.plan_mcore_to_hf(load_dir, save_dir, **kwargs)
    _assert_nothing_written(save_dir, before)


def test_mcore_missing_or_truncated_data_file(fake_mcore, tmp_path):
    data = next((fake_mcore / "release").glob("*.distcp"))
    original = data.read_bytes()
    data.write_bytes(original[:-8])
    _mg_fails(f"{data.name} is truncated", fake_mcore, tmp_path / "hf")
    data.unlink()
    _mg_fails(f"{data.name} is missing", fake_mcore, tmp_path / "hf")


def test_mcore_without_model_info_or_tracker_target(fake_mcore, tmp_path):
    (fake_mcore / "latest_checkpointed_iteration.txt").write_text("20")
    _mg_fails("names iter_0000020, which does not exist", fake_mcore, tmp_path / "hf")
    (fake_mcore / "latest_checkpointed_iteration.txt").write_text("release")
    (fake_mcore / "release" / mcore_io.MODEL_INFO).unlink()
    _mg_fails("mindrl_model.json is missing", fake_mcore, tmp_path / "hf")


def test_mcore_flags_and_save_dir(fake_mcore, tmp_path):
    out = tmp_path / "hf"
    _mg_fails("HF output is one unsharded model", fake_mcore, out, tp=2)
    _mg_fails("add --add-qkv-bias", fake_mcore, out, add_qkv_bias=False)
    _mg_fails("does not match", fake_mcore, out, model_type_hf="llama3")
    plan = converter.plan_mcore_to_hf(fake_mcore, out)  # no tokenizer: a note, not an error
    assert plan.tokenizer_dir is None and "no tokenizer carried" in plan.notes[0]
    _assert_nothing_written(out)
    out.mkdir()
    (out / "config.json").write_text("{}")
    _mg_fails("not empty", fake_mcore, out, before=["config.json"])


# ------------------------------------------------------------------ staging


def test_failed_conversion_leaves_the_target_as_it_was(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with staged_dir(target, overwrite=False) as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise RuntimeError("disk full")
    _assert_nothing_written(target)
    target.mkdir()
    (target / "old").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with staged_dir(target, overwrite=True) as tmp:
            (tmp / "new").write_text("new")
            raise KeyboardInterrupt
    _assert_nothing_written(target, before=["old"])
    with staged_dir(target, overwrite=True) as tmp:
        (tmp / "new").write_text("new")
    _assert_nothing_written(target, before=["new"])
