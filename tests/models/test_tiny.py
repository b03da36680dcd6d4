"""Random-init HF checkpoints (make_tiny_model) and the ModelSpec <-> HF config bridge."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, MistralConfig

from mindrl.models.hf_config import hf_config_from_spec, spec_from_hf_config
from mindrl.config.model_spec import available_models, load_model_spec
from mindrl.models.tiny import make_tiny_model
from mindrl.models.tokenizers import build_char_tokenizer
from mindrl.paths import REPO_ROOT
from support import run_env

CHAT = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(autouse=True)
def qwen25_cache(tmp_path_factory, monkeypatch):
    # Same folder as test_tokenizers' cache: the 151k-token build runs once per session.
    path = tmp_path_factory.getbasetemp() / "qwen25_tokenizer_cache"
    monkeypatch.setenv("MINDRL_CACHE_DIR", str(path.parent))
    return path


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    return make_tiny_model("tiny-qwen2", "char", tmp_path_factory.mktemp("ckpt") / "tiny-qwen2")


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def _forward(model, tok, text="2+2=4\nok"):
    ids = torch.tensor([tok.encode(text)])
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.isfinite(logits).all()
    return ids, logits


def test_char_checkpoint_loads_offline(tiny_qwen2):
    files = {p.name for p in tiny_qwen2.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json",
            "tokenizer.json", "tokenizer_config.json"} <= files
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_qwen2, local_files_only=True)
    ids, logits = _forward(model, tok)
    assert logits.shape == (1, ids.shape[1], 128)
    assert model.config.tie_word_embeddings
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    assert spec_from_hf_config(model.config, "tiny-qwen2") == load_model_spec("tiny-qwen2")
    gen = json.loads((tiny_qwen2 / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [2, 0] and gen["pad_token_id"] == 0


def test_loaded_char_tokenizer_matches_builder(tiny_qwen2):
    # AutoTokenizer rebuilds a qwen2 checkpoint's tokenizer as Qwen2Tokenizer: it must agree.
    loaded = AutoTokenizer.from_pretrained(tiny_qwen2, local_files_only=True)
    built = build_char_tokenizer()
    text = "  Hello, world!\n\n1+1=2 ~{}|\\`'\"\n"
    assert loaded.encode(text) == built.encode(text)
    assert len(loaded.encode(text)) == len(text)
    assert loaded.decode(loaded.encode(text)) == text
    assert (loaded.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
            == built.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True))
    assert (loaded.eos_token_id, loaded.pad_token_id) == (2, 0)


def test_seed_determinism(tiny_qwen2, tmp_path):
    same = _weights(make_tiny_model("tiny-qwen2", "char", tmp_path / "same", seed=0))
    other = _weights(make_tiny_model("tiny-qwen2", "char", tmp_path / "other", seed=1))
    first = _weights(tiny_qwen2)
    assert (tmp_path / "same" / "model.safetensors").read_bytes() == \
        (tiny_qwen2 / "model.safetensors").read_bytes()
    assert first.keys() == same.keys() == other.keys()
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)


def test_biases_and_norms_are_not_trivial(tiny_qwen2):
    w = _weights(tiny_qwen2)
    assert w["model.layers.0.self_attn.q_proj.bias"].abs().sum() > 0
    assert not torch.equal(w["model.layers.0.input_layernorm.weight"],
                           w["model.layers.0.post_attention_layernorm.weight"])
    assert abs(w["model.layers.0.mlp.up_proj.weight"].std().item() - 0.02) < 0.002


def test_bfloat16_is_the_float32_init_rounded(tiny_qwen2, tmp_path):
    bf16 = _weights(make_tiny_model("tiny-qwen2", "char", tmp_path / "bf16", dtype="bfloat16"))
    fp32 = _weights(tiny_qwen2)
    assert all(bf16[k].dtype == torch.bfloat16 and torch.equal(bf16[k], fp32[k].bfloat16())
               for k in fp32)
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_tiny_llama_untied_without_bias(tmp_path):
    out = make_tiny_model("tiny-llama", "char", tmp_path / "llama", seed=3)
    w = _weights(out)
    assert "lm_head.weight" in w and not torch.equal(w["lm_head.weight"],
                                                     w["model.embed_tokens.weight"])
    assert not any(k.endswith(".bias") for k in w)
    assert w["model.layers.0.self_attn.k_proj.weight"].shape == (32, 128)  # 1 query group
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.model_type == "llama" and not model.config.tie_word_embeddings
    _, logits = _forward(model, tok)
    assert logits.shape[-1] == 128
    assert spec_from_hf_config(model.config, "tiny-llama") == load_model_spec("tiny-llama")


def test_qwen25_vocab_checkpoint(tmp_path):
    out = make_tiny_model("tiny-qwen2-qwen25vocab", "qwen25", tmp_path / "q25")
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert len(tok) == 151665
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == \
        [151643, 151644, 151645]
    text = "Hello, world! 1+1=2"
    assert tok.decode(tok.encode(text)) == text
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids, logits = _forward(model, tok, tok.apply_chat_template(CHAT, tokenize=False,
                                                               add_generation_prompt=True))
    assert ids[0, 0].item() == 151644
    assert logits.shape == (1, ids.shape[1], 151936)


def test_refuses_non_empty_out_dir(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "stale.txt").write_text("x")
    with pytest.raises(FileExistsError, match="overwrite"):
        make_tiny_model("tiny-llama", "char", out)
    assert [p.name for p in out.iterdir()] == ["stale.txt"]
    make_tiny_model("tiny-llama", "char", out, overwrite=True)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
    (tmp_path / "empty").mkdir()
    make_tiny_model("tiny-llama", "char", tmp_path / "empty")


def test_vocab_too_small_names_the_yaml(tmp_path):
    with pytest.raises(ValueError, match=r"tiny-qwen2\.yaml.*tiny-qwen2-qwen25vocab"):
        make_tiny_model("tiny-qwen2", "qwen25", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_cli_from_another_directory(tmp_path):
    env = {k: v for k, v in run_env.for_a_run().items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [run_env.python(), str(REPO_ROOT / "cli" / "make_tiny_model.py"), "--model", "tiny-llama",
         "--tokenizer", "char", "--out", "model", "--seed", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "model")
    assert (tmp_path / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("name", available_models())
def test_spec_hf_config_round_trip(name):
    spec = load_model_spec(name)
    ids = dict(image_token_id=5, video_token_id=6, vision_start_token_id=7, vision_end_token_id=8)
    config = hf_config_from_spec(spec, eos_token_id=[1, 2],
                                 vision_token_ids=ids if spec.vision else None)
    assert config.model_type == ("qwen2_5_vl" if spec.vision else spec.architecture)
    rope = (config.text_config if spec.vision else config).rope_parameters
    assert rope["rope_theta"] == spec.rotary_base
    again = spec_from_hf_config(config.to_dict(), name, spec.make_vocab_size_divisible_by)
    assert again == spec


def test_legacy_config_json_with_top_level_rope_theta():
    spec = spec_from_hf_config({"model_type": "qwen2", "hidden_size": 64,
                                "intermediate_size": 128, "num_hidden_layers": 1,
                                "num_attention_heads": 4, "num_key_value_heads": 2,
                                "vocab_size": 100, "rope_theta": 5e5}, "old")
    assert spec.rotary_base == 5e5 and spec.add_qkv_bias and spec.kv_channels is None


def test_unsupported_hf_configs_are_refused():
    with pytest.raises(ValueError, match="supported: qwen2, llama"):
        spec_from_hf_config(MistralConfig(), "m")
    with pytest.raises(ValueError, match="supported: qwen2, llama"):
        spec_from_hf_config({"model_type": "gpt2"}, "g")
    with pytest.raises(ValueError, match="attention_bias"):
        spec_from_hf_config(LlamaConfig(attention_bias=True), "l")
    scaled = LlamaConfig(rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                          "factor": 2.0})
    with pytest.raises(ValueError, match="rope"):
        spec_from_hf_config(scaled, "l")


def test_unrepresentable_specs_are_refused():
    import dataclasses
    qwen = load_model_spec("tiny-qwen2")
    with pytest.raises(ValueError, match="qkv bias"):
        hf_config_from_spec(dataclasses.replace(qwen, add_qkv_bias=False))
    llama = load_model_spec("tiny-llama")
    with pytest.raises(ValueError, match="qkv-only bias"):
        hf_config_from_spec(dataclasses.replace(llama, add_qkv_bias=True))


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama"])
def test_reward_model_spec_hf_config_round_trip(name):
    import dataclasses
    spec = dataclasses.replace(load_model_spec(name), head="scalar")
    config = hf_config_from_spec(spec)
    assert config.architectures[0].endswith("ForSequenceClassification")
    assert config.num_labels == 1
    assert spec_from_hf_config(config.to_dict(), name, spec.make_vocab_size_divisible_by) == spec
    assert not spec.tied_embeddings   # a score head is never the embedding


def test_classifier_with_several_labels_is_refused():
    config = {**hf_config_from_spec(load_model_spec("tiny-qwen2")).to_dict(),
              "architectures": ["Qwen2ForSequenceClassification"],
              "id2label": {"0": "a", "1": "b"}}
    with pytest.raises(ValueError, match="num_labels=2"):
        spec_from_hf_config(config, "rm")



def test_unknown_head_is_refused():
    import dataclasses
    with pytest.raises(ValueError, match="head='value' is not supported"):
        dataclasses.replace(load_model_spec("tiny-qwen2"), head="value")
