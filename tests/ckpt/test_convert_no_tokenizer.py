"""A new user's round trip: save_pretrained of a fresh Qwen2 (no tokenizer saved), HF -> mcore
at TP2 x PP2 and back through cli/convert_ckpt.py with no extra flag, bit for bit."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
import transformers

from support.ckpt_hf_models import read_hf_tensors
from support import run_env

pytestmark = pytest.mark.slow   # see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--use-mcore-models", "--model-type", "GPT", "--add-qkv-bias",
          "--model-type-hf", "qwen2", "--no-progress"]


def _convert(*args) -> str:
    done = subprocess.run([run_env.python(), str(ROOT / "cli" / "convert_ckpt.py"), *COMMON,
                           *map(str, args)], env=run_env.for_a_run(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def test_hf_without_tokenizer_round_trips_bit_for_bit(tmp_path):
    config = transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    hf, mg, back = tmp_path / "hf", tmp_path / "mg", tmp_path / "hf_back"
    transformers.Qwen2ForCausalLM(config).save_pretrained(hf)  # weights and config only

    there = _convert("--load-model-type", "hf", "--save-model-type", "mg",
                     "--target-tensor-parallel-size", 2, "--target-pipeline-parallel-size", 2,
                     "--load-dir", hf, "--save-dir", mg)
    assert f"no tokenizer in {hf}" in there
    back_out = _convert("--load-model-type", "mg", "--save-model-type", "hf",
                        "--load-dir", mg, "--save-dir", back)

    notes = [ln for ln in back_out.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1, back_out
    assert notes[0].startswith("note: no tokenizer carried: ") and "--tokenizer-model" in notes[0]
    assert not [p.name for p in back.iterdir() if "token" in p.name]
    original, converted = read_hf_tensors(hf), read_hf_tensors(back)
    assert sorted(converted) == sorted(original)
    unequal = [k for k, v in original.items() if not torch.equal(converted[k], v)]
    assert not unequal, f"changed on the way round: {unequal}"
    assert json.loads((back / "config.json").read_text()) == \
        json.loads((hf / "config.json").read_text())
