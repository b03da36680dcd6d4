"""The Qwen3 example scripts convert the tiny Qwen3-MoE there and back as shipped, picked by
MODEL_TYPE_HF=qwen3-moe (the dense default is run in test_qwen3_family.py)."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from support.ckpt_hf_models import read_hf_tensors
from support import run_env

pytestmark = pytest.mark.slow   # two converter CLI runs

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "ckpt"


def test_qwen3_scripts_convert_the_tiny_moe(tmp_path):
    env = dict(run_env.for_a_run(), PYTHON=run_env.python(), MODEL_TYPE_HF="qwen3-moe",
               MODEL="tiny-qwen3-moe", EP="4", FIRST="1")   # the first stage's own count
    out = []
    for name in ("ckpt_convert_qwen3_hf2mcore.sh", "ckpt_convert_qwen3_mcore2hf.sh"):
        done = subprocess.run(["bash", str(SCRIPTS / name)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        out.append(done.stdout)
    assert "checked TP=2 PP=2 (layers per stage 1, 1) EP=4" in out[0]
    mcore = tmp_path / "model_weights" / "tiny_qwen3_moe_mcore" / "release"
    info = json.loads((mcore / "mindrl_model.json").read_text())
    assert info["params_dtype"] == "bf16" and info["spec"]["architecture"] == "qwen3_moe"
    assert info["validated_layouts"] == [{"tensor_model_parallel_size": 2,
                                          "pipeline_model_parallel_size": 2,
                                          "expert_model_parallel_size": 4,
                                          "decoder_first_pipeline_num_layers": 1}]
    original = read_hf_tensors(tmp_path / "model_from_hf" / "tiny_qwen3_moe_hf")
    back = read_hf_tensors(tmp_path / "model_from_hf" / "tiny_qwen3_moe_hf_from_mcore")
    assert sorted(original) == sorted(back)
    assert "model.layers.1.mlp.experts.7.up_proj.weight" in back
    assert all(torch.equal(back[k], v.to(torch.bfloat16)) for k, v in original.items())
