"""Qwen2.5-VL through the converter (--model-type-hf qwen2_5_vl), against transformers.

A tiny random transformers Qwen2_5_VLForConditionalGeneration is saved with save_pretrained
plus processor and tokenizer files. HF -> mcore (recorded target TP2 x PP2) -> HF gives back
every tensor bit for bit, config.json and every processor/tokenizer file byte for byte. The
Megatron checkpoint loaded into Qwen25VLModel at TP2 and at PP2 gives transformers' logits
on a prompt with one image. A checkpoint saved with a loaded model's names
(model.language_model.* / model.visual.*) converts to the same bytes. Bad inputs are clear
errors naming the file, tensor or flag, with nothing written.

Two spawns: one single-process world runs the conversions, one 2-rank world loads.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from mindrl.ckpt import converter, mcore_io
from mindrl.ckpt.convert_checks import ConversionError
from mindrl.distributed import spawn_local

from support.ckpt_convert_worker import run_conversions
from support.ckpt_hf_models import make_hf_model, read_hf_tensors, save_hf
from support.ckpt_vl_models import ASSET_FILES, save_vl_hf
from support.ckpt_vl_worker import vl_logits_from_checkpoint
from support.tiny_vl import IMAGE_PAD, prompts, tiny_vl_model
from support import run_env

pytestmark = pytest.mark.slow   # see tests/conftest.py

LOGITS_ATOL = 1e-5
ONE_IMAGE = prompts()[1]    # a 6 x 8 patch image between text tokens


def _hf_inputs(sample):
    ids = sample["input_ids"].unsqueeze(0)
    return dict(input_ids=ids, mm_token_type_ids=(ids == IMAGE_PAD).long(),
                pixel_values=sample["pixel_values"], image_grid_thw=sample["image_grid_thw"])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Both HF layouts of one model, its transformers logits, and the conversions."""
    root = tmp_path_factory.mktemp("convert_vl")
    save_vl_hf(root / "hf")
    save_vl_hf(root / "hf_runtime", runtime_names=True)
    with torch.no_grad():
        expected = tiny_vl_model()(**_hf_inputs(ONE_IMAGE)).logits
    common = dict(model_type_hf="qwen2_5_vl", add_qkv_bias=True)
    jobs = [("hf2mg", dict(load_dir=root / "hf", save_dir=root / "mg", tp=2, pp=2, **common)),
            ("mg2hf", dict(load_dir=root / "mg", save_dir=root / "hf2", max_shard_size="1MB",
                           **common)),
            ("hf2mg", dict(load_dir=root / "hf_runtime", save_dir=root / "mg_runtime",
                           **common)),
            ("mg2hf", dict(load_dir=root / "mg_runtime", save_dir=root / "hf2_runtime"))]
    spawn_local(run_conversions, 1, jobs)
    return root, expected


def test_round_trip_is_bit_identical_with_config_and_processor_files(world):
    root, _ = world
    original, back = read_hf_tensors(root / "hf"), read_hf_tensors(root / "hf2")
    assert sorted(back) == sorted(original)
    assert sum(k.startswith("visual.") for k in back) == 54   # depth 4: 1 + 4 x 12 + 5
    different = [k for k, v in original.items()
                 if v.dtype != back[k].dtype or not torch.equal(v, back[k])]
    assert not different, different
    assert len(list((root / "hf2").glob("*.safetensors"))) > 1   # streamed into shards
    config, config_back = (json.loads((d / "config.json").read_text())
                           for d in (root / "hf", root / "hf2"))
    assert config_back == config
    assert config_back["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    for name in ASSET_FILES + ("generation_config.json",):
        for folder in (root / "mg" / "release" / "hf", root / "hf2"):
            assert (folder / name).read_bytes() == (root / "hf" / name).read_bytes(), \
                f"{folder / name} differs from the input's"
    info = json.loads((root / "mg" / "release" / mcore_io.MODEL_INFO).read_text())
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2}]
    assert info["vision"]["family"] == "qwen2_5_vl"
    assert info["vision"]["hf_config"]["vision_config"] == config["vision_config"]


def test_runtime_layout_input_converts_to_the_same_bytes(world):
    root, _ = world
    runtime_names = read_hf_tensors(root / "hf_runtime")
    assert any(k.startswith("model.language_model.") for k in runtime_names)
    assert any(k.startswith("model.visual.") for k in runtime_names)
    ckpt, ckpt_runtime = root / "mg" / "release", root / "mg_runtime" / "release"
    # Same tensors (keys, shapes, dtypes) and the same bytes in the data file; the DCP
    # .metadata differs only in its save's identity.
    assert mcore_io.check_checkpoint_files(ckpt_runtime) == mcore_io.check_checkpoint_files(ckpt)
    assert (ckpt_runtime / "__0_0.distcp").read_bytes() == (ckpt / "__0_0.distcp").read_bytes()
    original, back = read_hf_tensors(root / "hf"), read_hf_tensors(root / "hf2_runtime")
    assert sorted(back) == sorted(original)          # written with the on-disk names
    assert all(torch.equal(v, back[k]) for k, v in original.items())


def test_converted_checkpoint_gives_transformers_logits_at_tp2_and_pp2(world):
    root, expected = world
    ranks = spawn_local(vl_logits_from_checkpoint, 2, str(root / "mg"), ONE_IMAGE,
                        [(2, 1), (1, 2)])
    found = {k: v for r in ranks for k, v in r.items()}
    assert set(found) == {(2, 1), (1, 2)}
    report = {}
    for layout, logits in found.items():
        report[layout] = (logits[:, :expected.shape[1]] - expected).abs().max().item()
    print("max |logits - transformers| (TP, PP):", report)
    assert max(report.values()) <= LOGITS_ATOL, report


# ------------------------------------------------------------------ bad inputs

@pytest.fixture(scope="module")
def text_hf(tmp_path_factory):
    return save_hf(make_hf_model("qwen2", True, 2, 126), tmp_path_factory.mktemp("text") / "hf")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _hf2mg_error(load_dir, save_dir, **kw) -> str:
    kw = {"model_type_hf": "qwen2_5_vl", "add_qkv_bias": True, **kw}
    with pytest.raises(ConversionError) as e:
        converter.plan_hf_to_mcore(load_dir, save_dir, **kw)
    assert not Path(save_dir).exists(), "an input error wrote output"
    return str(e.value)


def test_vl_recipe_on_a_text_checkpoint_and_the_reverse(world, text_hf, tmp_path):
    root, _ = world
    message = _hf2mg_error(text_hf, tmp_path / "out")
    assert "--model-type-hf qwen2_5_vl" in message and "config.json" in message
    assert "model_type 'qwen2'" in message and "text-only" in message
    message = _hf2mg_error(root / "hf", tmp_path / "out", model_type_hf="qwen2")
    assert "model_type 'qwen2_5_vl'" in message
    assert "Qwen2_5_VLForConditionalGeneration" in message
    assert "use --model-type-hf qwen2_5_vl" in message
    # mcore -> hf: the recorded model decides, a text checkpoint is no VL one.
    with pytest.raises(ConversionError, match="model_type 'qwen2_5_vl'.*use --model-type-hf "
                                              "qwen2_5_vl"):
        converter.plan_mcore_to_hf(root / "mg", tmp_path / "o1", model_type_hf="llama2")
    text_mg = tmp_path / "text_mg"
    spawn_local(run_conversions, 1, [("hf2mg", dict(load_dir=text_hf, save_dir=text_mg))])
    with pytest.raises(ConversionError, match="model_type 'qwen2'.*text-only"):
        converter.plan_mcore_to_hf(text_mg, tmp_path / "o2", model_type_hf="qwen2_5_vl")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_missing_processor_is_a_note_and_a_lone_processor_an_error(world, tmp_path):
    """No image processor: weights, config and tokenizer convert, with the note (the
    processor is checked where it is used); an image processor without its tokenizer is an
    incomplete processor, refused. tests/ckpt/test_convert_vl_bare.py runs the bare folder."""
    root, _ = world
    hf = _copy(root / "hf", tmp_path / "hf")
    (hf / "preprocessor_config.json").unlink()
    plan = converter.plan_hf_to_mcore(hf, tmp_path / "out", model_type_hf="qwen2_5_vl",
                                      add_qkv_bias=True)
    plan.weights.close()
    assert plan.processor_dir is None and plan.tokenizer_dir == hf
    assert len(plan.notes) == 1 and plan.notes[0].startswith(f"no processor files in {hf} ")
    hf = _copy(root / "hf", tmp_path / "hf_no_tok")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "chat_template.json"):
        (hf / name).unlink()
    message = _hf2mg_error(hf, tmp_path / "out")
    assert f"{hf / 'tokenizer.json'} is missing" in message
    assert "copy it from the original model download" in message
    mg = _copy(root / "mg", tmp_path / "mg")
    assets = mg / "release" / "hf"
    (assets / "preprocessor_config.json").unlink()
    plan = converter.plan_mcore_to_hf(mg, tmp_path / "out")
    assert plan.processor_dir is None and plan.tokenizer_dir == assets
    assert len(plan.notes) == 1 and plan.notes[0].startswith(f"no processor files in {assets} ")
    assert not (tmp_path / "out").exists()


def test_missing_or_unexpected_vision_tensors_are_named(world, text_hf, tmp_path):
    from safetensors.torch import load_file, save_file

    root, _ = world

    def rewrite(folder, change):
        state = load_file(folder / "model.safetensors")
        change(state)
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
        return folder

    hf = rewrite(_copy(root / "hf", tmp_path / "hf"),
                 lambda s: s.pop("visual.blocks.3.mlp.down_proj.bias"))
    message = _hf2mg_error(hf, tmp_path / "out")
    assert "'visual.blocks.3.mlp.down_proj.bias' (shape (128,)) is missing" in message
    hf = rewrite(_copy(root / "hf", tmp_path / "hf_extra"),
                 lambda s: s.update({"visual.blocks.4.norm1.weight": torch.ones(128)}))
    assert "unexpected tensor 'visual.blocks.4.norm1.weight'" in _hf2mg_error(hf, tmp_path / "o")
    text = rewrite(_copy(text_hf, tmp_path / "text"),
                   lambda s: s.update({"visual.merger.ln_q.weight": torch.ones(128)}))
    message = _hf2mg_error(text, tmp_path / "o", model_type_hf="qwen2")
    assert "unexpected vision tensor 'visual.merger.ln_q.weight'" in message
    assert "text-only qwen2" in message


def test_example_scripts_run_on_the_tiny_model(world, tmp_path):
    """The two shipped scripts, pointed at the tiny model through their environment settings
    (bf16 and TP2 x PP2 as their defaults for 7B), through cli/convert_ckpt.py."""
    import subprocess

    root, _ = world
    scripts = Path(__file__).resolve().parents[2] / "examples" / "ckpt"
    env = dict(run_env.for_a_run(), PYTHON=run_env.python(), HF_DIR=str(root / "hf"),
               MCORE_DIR=str(tmp_path / "mg"), HF_OUT_DIR=str(tmp_path / "hf"))
    for name in ("ckpt_convert_qwen25vl_hf2mcore.sh", "ckpt_convert_qwen25vl_mcore2hf.sh"):
        done = subprocess.run(["bash", str(scripts / name)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        assert "wrote " in done.stdout
    info = json.loads((tmp_path / "mg" / "release" / mcore_io.MODEL_INFO).read_text())
    assert info["params_dtype"] == "bf16"
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2}]
    original, back = read_hf_tensors(root / "hf"), read_hf_tensors(tmp_path / "hf")
    assert sorted(back) == sorted(original)
    assert all(torch.equal(back[k], v.to(torch.bfloat16)) for k, v in original.items())
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["dtype"] == "bfloat16"
    assert (tmp_path / "hf" / "preprocessor_config.json").read_bytes() == \
        (root / "hf" / "preprocessor_config.json").read_bytes()


def _conversion_errors(rank, world_size, jobs):
    """Each job's ConversionError message (None: it converted), in a one-process world."""
    from mindrl.ckpt import converter as conv

    out = []
    for load_dir, save_dir in jobs:
        try:
            conv.mcore_to_hf(load_dir, save_dir, progress=False)
            out.append(None)
        except conv.ConversionError as e:
            out.append(str(e))
    return out


def test_mcore_vision_tensors_missing_or_unrecorded_are_named(world, tmp_path):
    root, _ = world
    # A VL checkpoint whose metadata lost its vision entry: its vision tensors would be lost.
    bare = _copy(root / "mg", tmp_path / "bare")
    info_path = bare / "release" / mcore_io.MODEL_INFO
    info = json.loads(info_path.read_text())
    depth5 = json.loads(json.dumps(info))
    del info[mcore_io.VISION_INFO]
    info_path.write_text(json.dumps(info))
    with pytest.raises(ConversionError, match=r"holds vision tensors \(visual\.blocks\.0\."
                                              r"attn\.proj\.bias, \.\.\. 54 in all\)"):
        converter.plan_mcore_to_hf(bare, tmp_path / "out")
    # A recorded tower deeper than the saved one: the missing block is named before writing.
    deeper = _copy(root / "mg", tmp_path / "deeper")
    depth5[mcore_io.VISION_INFO]["hf_config"]["vision_config"]["depth"] = 5
    (deeper / "release" / mcore_io.MODEL_INFO).write_text(json.dumps(depth5))
    with pytest.raises(ConversionError, match="disagrees .* about the vision tower"):
        converter.plan_mcore_to_hf(deeper, tmp_path / "out")
    config = json.loads((deeper / "release" / "hf" / "config.json").read_text())
    config["vision_config"]["depth"] = 5
    (deeper / "release" / "hf" / "config.json").write_text(json.dumps(config))
    (message,) = spawn_local(_conversion_errors, 1, [(deeper, tmp_path / "out")])[0]
    assert message is not None and "'visual.blocks.4." in message
    assert "is not in the checkpoint" in message
    assert not (tmp_path / "out").exists()


def test_cli_reports_a_text_checkpoint_given_to_the_vl_recipe(text_hf, tmp_path, capsys):
    import importlib.util
    import os

    from test_convert_cli import GUIDE, ROOT   # the guide's flags, this checkout

    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("convert_ckpt_cli_vl",
                                                  ROOT / "cli" / "convert_ckpt.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    os.environ.clear()
    os.environ.update(saved)
    argv = [("qwen2_5_vl" if a == "llama2" else a) for a in GUIDE]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv + ["--load-dir", str(text_hf), "--save-dir", str(tmp_path / "mg")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--model-type-hf qwen2_5_vl does not match" in err and "text-only" in err
    assert "use --model-type-hf qwen2 or llama2" in err
    assert not (tmp_path / "mg").exists()
