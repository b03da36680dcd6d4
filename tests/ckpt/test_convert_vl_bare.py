"""A user's Qwen2.5-VL as a bare save_pretrained writes it (weights and config, no tokenizer
nor processor files) converts both ways through the shipped example scripts, bit for bit, with
one note line each way naming the missing files, where they are needed and how to add them; a
--tokenizer-model folder holding tokenizer and processor files adds them, as a folder the
processor loader accepts."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mindrl.ckpt import converter
from mindrl.ckpt.convert_checks import ConversionError
from mindrl.models.processors import (build_char_vl_tokenizer, load_vl_processor,
                                      write_vl_tokenizer_and_processor)

from support.ckpt_hf_models import read_hf_tensors
from support.tiny_vl import tiny_vl_model
from support import run_env

pytestmark = pytest.mark.slow   # see tests/conftest.py

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "ckpt"
CONFIG = {"config.json", "generation_config.json"}


def _small_files(folder: Path) -> set:
    """What a folder holds besides its weights (safetensors shards and their index)."""
    return {p.name for p in folder.iterdir()
            if not p.name.endswith((".safetensors", ".safetensors.index.json"))}


def _script(name: str, **env) -> list:
    """The example script's note lines (it must succeed and say what it wrote)."""
    done = subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True,
                          timeout=300, env=dict(run_env.for_a_run(), PYTHON=run_env.python(),
                                                **{k: str(v) for k, v in env.items()}))
    assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "wrote " in done.stdout
    return [line for line in done.stdout.splitlines() if line.startswith("note: ")]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The bare folder, a processor folder, and the three conversions' notes."""
    root = tmp_path_factory.mktemp("convert_vl_bare")
    tiny_vl_model(seed=3).save_pretrained(root / "hf")
    write_vl_tokenizer_and_processor(root / "processor")
    notes = {
        "hf2mg": _script("ckpt_convert_qwen25vl_hf2mcore.sh", HF_DIR=root / "hf",
                         MCORE_DIR=root / "mg", PARAMS_DTYPE="fp32"),
        "mg2hf": _script("ckpt_convert_qwen25vl_mcore2hf.sh", MCORE_DIR=root / "mg",
                         HF_OUT_DIR=root / "hf_back"),
        "mg2hf_processor": _script("ckpt_convert_qwen25vl_mcore2hf.sh", MCORE_DIR=root / "mg",
                                   HF_OUT_DIR=root / "hf_full", TOKENIZER=root / "processor")}
    return root, notes


def _same_tensors(a: Path, b: Path) -> None:
    original, back = read_hf_tensors(a), read_hf_tensors(b)
    assert sorted(back) == sorted(original)
    assert sum(k.startswith("visual.") for k in back) == 54
    different = [k for k, v in original.items()
                 if v.dtype != back[k].dtype or not torch.equal(v, back[k])]
    assert not different, different


def test_bare_folder_round_trips_bit_for_bit_with_one_note_each_way(world):
    root, notes = world
    hf, back = root / "hf", root / "hf_back"
    # What save_pretrained wrote: weights and config only.
    assert {p.name for p in hf.iterdir()} == CONFIG | {"model.safetensors"}
    assert len(notes["hf2mg"]) == 1, notes
    there = notes["hf2mg"][0]
    assert f"no processor or tokenizer files in {hf} " in there
    assert len(notes["mg2hf"]) == 1, notes
    back_note = notes["mg2hf"][0]
    assert f"no processor or tokenizer files in {root / 'mg' / 'release' / 'hf'} " in back_note
    for note in (there, back_note):
        for piece in ("preprocessor_config.json", "training and data preprocessing",
                      "tokenizer_name_or_path", "--tokenizer-model", "copy its tokenizer and "
                      "processor files"):
            assert piece in note, note
    assert "gets weights and config only" in back_note and str(back) in back_note
    assert _small_files(root / "mg" / "release" / "hf") == CONFIG
    assert _small_files(back) == CONFIG
    _same_tensors(hf, back)
    for name in ("config.json", "generation_config.json"):
        assert (back / name).read_bytes() == (hf / name).read_bytes(), name


def test_tokenizer_model_folder_adds_tokenizer_and_processor(world):
    root, notes = world
    assert notes["mg2hf_processor"] == []
    full, processor = root / "hf_full", root / "processor"
    assert _small_files(full) == CONFIG | {p.name for p in processor.iterdir()}
    for name in (p.name for p in processor.iterdir()):
        assert (full / name).read_bytes() == (processor / name).read_bytes(), name
    _same_tensors(root / "hf", full)
    assert type(load_vl_processor(full)).__name__ == "Qwen2_5_VLProcessor"
    # hf -> mcore: the flag's folder gives the processor files too, and then no note.
    plan = converter.plan_hf_to_mcore(root / "hf", root / "unused", model_type_hf="qwen2_5_vl",
                                      add_qkv_bias=True, tokenizer_model=str(processor))
    plan.weights.close()
    assert plan.processor_dir == processor and plan.tokenizer_dir == processor
    assert plan.notes == []


def test_tokenizer_without_processor_converts_with_the_note(world, tmp_path):
    root, _ = world
    hf = tmp_path / "hf"
    shutil.copytree(root / "hf", hf)
    build_char_vl_tokenizer().save_pretrained(hf)     # the tokenizer saved, not the processor
    plan = converter.plan_hf_to_mcore(hf, tmp_path / "mg", model_type_hf="qwen2_5_vl",
                                      add_qkv_bias=True)
    plan.weights.close()
    assert plan.tokenizer_dir == hf and plan.processor_dir is None
    assert len(plan.notes) == 1 and plan.notes[0].startswith(f"no processor files in {hf} ")
    assert "gets weights and config and the tokenizer only" in plan.notes[0]
    # An image processor without its tokenizer is an incomplete processor: refused.
    lone = tmp_path / "lone"
    shutil.copytree(root / "hf", lone)
    shutil.copy(root / "processor" / "processor_config.json", lone)
    with pytest.raises(ConversionError, match=rf"{lone / 'tokenizer.json'} is missing: .*"
                                              rf"processor \({lone / 'processor_config.json'}"
                                              rf"\) needs its tokenizer"):
        converter.plan_hf_to_mcore(lone, tmp_path / "mg2", model_type_hf="qwen2_5_vl")
    assert not (tmp_path / "mg").exists() and not (tmp_path / "mg2").exists()
    json.loads((hf / "config.json").read_text())   # the input is left as it was
