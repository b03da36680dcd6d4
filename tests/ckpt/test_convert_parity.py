"""HF -> mcore gives transformers' logits at TP1, TP2, PP2, TP2xPP2; HF -> mcore -> HF is exact.

Two spawns for everything: one single-process world runs all conversions, one 4-rank world
loads every checkpoint at every layout the model allows.
"""

import json

import pytest
import torch

from mindrl.distributed import spawn_local

from support.ckpt_convert_worker import logits_from_checkpoints, run_conversions
from support.ckpt_hf_models import VARIANTS, make_hf_model, read_hf_tensors, save_hf

pytestmark = pytest.mark.slow   # see tests/conftest.py

ALL_LAYOUTS = [(1, 1), (2, 1), (1, 2), (2, 2)]
# The loading model's vocab divisor (the converter writes unpadded rows): 4 pads 126 -> 128.
LOADER_DIVISIBLE = {"qwen2_tied_g2": 4}
TOKENS = torch.randint(0, 126, (4, 12), generator=torch.Generator().manual_seed(1))


def _layouts(groups):
    return [(tp, pp) for tp, pp in ALL_LAYOUTS if groups % tp == 0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """HF dirs, their transformers logits, and every conversion, done once."""
    root = tmp_path_factory.mktemp("convert")
    jobs, expected, groups = [], {}, {}
    for i, (name, (arch, tied, g, vocab)) in enumerate(VARIANTS.items()):
        model = make_hf_model(arch, tied, g, vocab, seed=i)
        with torch.no_grad():
            expected[name] = model(TOKENS).logits
        shard = "300KB" if name == "llama_untied_g1" else None  # one sharded input with index
        save_hf(model, root / name / "hf", max_shard_size=shard)
        groups[name] = g
        tp = 2 if g % 2 == 0 else 1
        jobs.append(("hf2mg", dict(load_dir=root / name / "hf", save_dir=root / name / "mg",
                                   tp=tp, pp=2, model_type_hf=arch,
                                   add_qkv_bias=arch == "qwen2")))
        jobs.append(("mg2hf", dict(load_dir=root / name / "mg", save_dir=root / name / "hf2",
                                   max_shard_size="200KB")))
    # bf16: fp32 weights converted down, and bf16 weights kept as they are.
    jobs.append(("hf2mg", dict(load_dir=root / "qwen2_tied_g2" / "hf",
                               save_dir=root / "bf16" / "mg", params_dtype="bf16")))
    jobs.append(("mg2hf", dict(load_dir=root / "bf16" / "mg", save_dir=root / "bf16" / "hf2")))
    bf16_src = make_hf_model("llama", False, 2, 128, seed=7)
    save_hf(bf16_src, root / "bf16_native" / "hf", dtype=torch.bfloat16)
    jobs.append(("hf2mg", dict(load_dir=root / "bf16_native" / "hf",
                               save_dir=root / "bf16_native" / "mg")))
    jobs.append(("mg2hf", dict(load_dir=root / "bf16_native" / "mg",
                               save_dir=root / "bf16_native" / "hf2")))
    spawn_local(run_conversions, 1, jobs)
    return root, expected, groups


@pytest.fixture(scope="module")
def megatron_logits(world):
    root, _, groups = world
    cases = [(name, str(root / name / "mg"), LOADER_DIVISIBLE.get(name, 1), _layouts(g))
             for name, g in groups.items()]
    results = spawn_local(logits_from_checkpoints, 4, cases, TOKENS,
                          str(root / "llama_tied_g2" / "mg"),
                          ("qwen2_tied_g2", 2, 2, str(root / "trainer_tp2pp2")))
    return {k: v for r in results for k, v in r.items()}


def test_logits_match_transformers_at_every_layout(world, megatron_logits):
    _, expected, groups = world
    report = []
    for name, g in groups.items():
        for tp, pp in _layouts(g):
            logits, pad_max = megatron_logits[(name, tp, pp)]
            diff = (logits - expected[name]).abs().max().item()
            report.append(f"{name} TP{tp}PP{pp}: {diff:.2e}")
            assert diff <= 1e-5, f"{name} TP{tp} PP{pp}: max |mcore - transformers| = {diff}"
            assert pad_max == 0.0, f"{name} TP{tp} PP{pp}: padded vocab rows score {pad_max}"
    print("max |logits - transformers|:", "; ".join(report))
    assert len(report) == 14


def test_trainer_checkpoint_at_tp2_pp2_converts_back_exactly(world, megatron_logits):
    """save_mcore_checkpoint at TP2 PP2 (4 ranks, vocab padded to 128 rows) -> HF is exact."""
    root = world[0]
    trainer = root / "trainer_tp2pp2"
    assert (trainer / "latest_checkpointed_iteration.txt").read_text() == "7"
    assert (trainer / "iter_0000007" / "hf" / "config.json").is_file()
    spawn_local(run_conversions, 1, [("mg2hf", dict(load_dir=trainer, save_dir=root / "tr_hf",
                                                   model_type_hf="qwen2", add_qkv_bias=True))])
    original = read_hf_tensors(root / "qwen2_tied_g2" / "hf")
    back = read_hf_tensors(root / "tr_hf")
    assert sorted(original) == sorted(back)
    assert all(torch.equal(back[k], v) for k, v in original.items())


def test_loading_into_a_model_of_another_shape_is_refused(megatron_logits):
    message = megatron_logits["wrong_shape_error"]
    assert message and "ffn_hidden_size: checkpoint 256, model 512" in message


@pytest.mark.parametrize("name", list(VARIANTS))
def test_round_trip_is_bit_identical(world, name):
    root = world[0] / name
    original, back = read_hf_tensors(root / "hf"), read_hf_tensors(root / "hf2")
    assert sorted(original) == sorted(back)
    for key, tensor in original.items():
        assert back[key].dtype == tensor.dtype and torch.equal(back[key], tensor), key
    assert (root / "hf2" / "config.json").read_bytes() == (root / "hf" / "config.json").read_bytes()
    index = json.loads((root / "hf2" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(original)
    assert len(set(index["weight_map"].values())) > 1  # really sharded
    assert (root / "hf2" / "tokenizer.json").is_file()


def test_round_trip_output_loads_in_transformers(world):
    import transformers

    root, expected, _ = world
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "llama_untied_g1" / "hf2")
    with torch.no_grad():
        assert torch.equal(model(TOKENS).logits, expected["llama_untied_g1"])
    tok = transformers.AutoTokenizer.from_pretrained(root / "llama_untied_g1" / "hf2")
    assert tok("ab").input_ids


def test_bf16_conversion(world):
    root = world[0]
    original = read_hf_tensors(root / "qwen2_tied_g2" / "hf")
    back = read_hf_tensors(root / "bf16" / "hf2")
    assert sorted(back) == sorted(original)
    for key, tensor in original.items():
        assert back[key].dtype == torch.bfloat16
        assert torch.equal(back[key], tensor.to(torch.bfloat16)), key
    info = json.loads((root / "bf16" / "mg" / "release" / "mindrl_model.json").read_text())
    assert info["params_dtype"] == "bf16"
    config = json.loads((root / "bf16" / "hf2" / "config.json").read_text())
    source = json.loads((root / "qwen2_tied_g2" / "hf" / "config.json").read_text())
    assert config.pop("dtype") == "bfloat16"
    source.pop("dtype")
    assert config == source
    native, native_back = (read_hf_tensors(root / "bf16_native" / d) for d in ("hf", "hf2"))
    assert all(native_back[k].dtype == torch.bfloat16 and torch.equal(native_back[k], v)
               for k, v in native.items()) and sorted(native) == sorted(native_back)


def test_checkpoint_layout(world):
    mg = world[0] / "qwen2_tied_g2" / "mg"
    assert (mg / "latest_checkpointed_iteration.txt").read_text() == "release"
    names = {p.name for p in (mg / "release").iterdir()}
    assert {"metadata.json", "common.pt", ".metadata", "mindrl_model.json", "hf"} <= names
    assert json.loads((mg / "release" / "metadata.json").read_text())["sharded_backend"] == \
        "torch_dist"
    assert not [p for p in mg.parent.iterdir() if ".tmp-" in p.name]  # staging cleaned up


VLLM_SCRIPT = r"""
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, block_size=32,
          kv_cache_memory_bytes=32 << 20, max_model_len=64, seed=0)
prompt = json.loads(sys.argv[2])
out = llm.generate([TokensPrompt(prompt_token_ids=prompt)],
                   SamplingParams(max_tokens=6, temperature=0.0, logprobs=0))[0].outputs[0]
print(json.dumps({"tokens": list(out.token_ids),
                  "logprobs": [lp[t].logprob for lp, t in zip(out.logprobs, out.token_ids)]}))
"""


def test_round_trip_output_loads_in_vllm(world):
    """vLLM (CPU build, its own process) serves the converted directory with the original's
    log-probabilities."""
    import os
    import subprocess
    import sys

    import transformers

    root = world[0] / "qwen2_untied_g4"
    prompt = TOKENS[0, :8].tolist()
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_OMP_THREADS_BIND="nobind",
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", VLLM_SCRIPT, str(root / "hf2"),
                           json.dumps(prompt)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    original = transformers.AutoModelForCausalLM.from_pretrained(root / "hf")
    ids = torch.tensor([prompt + result["tokens"]])
    with torch.no_grad():
        logprobs = torch.log_softmax(original(ids).logits[0, len(prompt) - 1:-1], dim=-1)
    expected = logprobs[torch.arange(len(result["tokens"])), result["tokens"]]
    diff = (expected - torch.tensor(result["logprobs"])).abs().max().item()
    print("vLLM vs transformers (original weights) max |logprob diff| =", diff)
    assert diff <= 1e-4
