"""cli/convert_ckpt.py: the guide's flags, clear errors for bad combinations, and the two
example scripts running as shipped on a tiny model the factory makes."""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from support.ckpt_hf_models import read_hf_tensors
from support import run_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cli():
    """Import cli/convert_ckpt.py without letting its env defaults leak into other tests."""
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("convert_ckpt_cli",
                                                  ROOT / "cli" / "convert_ckpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ.clear()
    os.environ.update(saved)
    return module


GUIDE = ["--use-mcore-models", "--model-type", "GPT", "--load-model-type", "hf",
         "--save-model-type", "mg", "--target-tensor-parallel-size", "2",
         "--target-pipeline-parallel-size", "2", "--add-qkv-bias", "--model-type-hf", "llama2",
         "--params-dtype", "bf16"]


@pytest.mark.parametrize("change,message", [
    (lambda a: [x for x in a if x != "--use-mcore-models"], "add --use-mcore-models"),
    (lambda a: a[:2] + ["BERT"] + a[3:], "--model-type BERT: only GPT"),
    (lambda a: [("hf" if x == "mg" else x) for x in a], "nothing to convert"),
    (lambda a: a + ["--max-shard-size", "1GB"], "--max-shard-size applies to HF output"),
    (lambda a: [("mistral" if x == "llama2" else x) for x in a], "invalid choice: 'mistral'"),
    (lambda a: [("hf" if x == "mg" else "mg" if x == "hf" else x) for x in a]
     + ["--decoder-last-pipeline-num-layers", "1"], "leave out --decoder-first/last"),
])
def test_bad_flag_combinations(cli, tmp_path, capsys, change, message):
    argv = change(GUIDE + ["--load-dir", str(tmp_path / "hf"), "--save-dir", str(tmp_path / "mg")])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "mg").exists()


@pytest.mark.slow
def test_example_scripts_run_as_shipped(tmp_path):
    env = dict(run_env.for_a_run(), PYTHON=run_env.python())
    for name in ("HF_DIR", "MCORE_DIR", "HF_OUT_DIR", "TOKENIZER", "TP", "PP", "PARAMS_DTYPE"):
        env.pop(name, None)                 # as shipped: the script's own settings
    scripts = ROOT / "examples" / "ckpt"
    for name in ("ckpt_convert_qwen25_hf2mcore.sh", "ckpt_convert_qwen25_mcore2hf.sh"):
        done = subprocess.run(["bash", str(scripts / name)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        assert "wrote " in done.stdout
    hf = tmp_path / "model_from_hf" / "tiny_qwen25_hf"
    back = tmp_path / "model_from_hf" / "tiny_qwen25_hf_from_mcore"
    mcore = tmp_path / "model_weights" / "tiny_qwen25_mcore"
    assert (mcore / "latest_checkpointed_iteration.txt").read_text() == "release"
    info = json.loads((mcore / "release" / "mindrl_model.json").read_text())
    assert info["params_dtype"] == "bf16"
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2}]
    original, converted = read_hf_tensors(hf), read_hf_tensors(back)
    assert sorted(original) == sorted(converted)
    assert all(torch.equal(converted[k], v.to(torch.bfloat16)) for k, v in original.items())
    assert json.loads((back / "config.json").read_text())["dtype"] == "bfloat16"
    # settings from the environment, as the Qwen3 and Qwen2.5-VL scripts take them
    done = subprocess.run(["bash", str(scripts / "ckpt_convert_qwen25_hf2mcore.sh")],
                          cwd=tmp_path, env=dict(env, HF_DIR=str(hf), TP="1", PP="1",
                                                 MCORE_DIR=str(tmp_path / "env_mcore"),
                                                 PARAMS_DTYPE="fp32"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((tmp_path / "env_mcore" / "release" / "mindrl_model.json").read_text())
    assert info["params_dtype"] == "fp32" and info["validated_layouts"] == [
        {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1}]
