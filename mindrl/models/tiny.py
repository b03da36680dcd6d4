"""Random-init HF checkpoints for any configs/model shape: the project's stand-in for hub weights.

No PyPI package ships LLM weights and nothing may be downloaded, so tests, demos and the
converter start from a directory written here: config.json, model.safetensors,
generation_config.json and the tokenizer files, loadable by ``AutoModelForCausalLM`` /
``AutoTokenizer`` / vLLM like a downloaded model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Union

import torch

from mindrl.config.model_spec import load_model_spec
from mindrl.models.tokenizers import build_tokenizer
from mindrl.paths import model_config_path
from mindrl.staging import refuse_occupied, staged_dir

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
INITIALIZER_RANGE = 0.02


def init_weights_(model: torch.nn.Module, seed: int, std: float = INITIALIZER_RANGE) -> None:
    """Seeded N(0, std) init of every parameter, independent of the global torch RNG.

    Unlike HF's init, biases get N(0, std) and norm scales 1 + N(0, std): with zeros and ones
    a converter that drops a bias or swaps two norms would still produce identical logits.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * std
            module = name.rsplit(".", 2)[-2]
            if "norm" in module or module.startswith("ln_"):   # ln_q: the VL patch merger
                noise += 1.0
            param.copy_(noise)


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    refuse_occupied(out_dir, overwrite, FileExistsError, str(out_dir),
                    "pass overwrite=True (--overwrite) to replace it")


def make_tiny_model(model: str, tokenizer: str, out_dir: Union[str, Path], seed: int = 0,
                    dtype: str = "float32", overwrite: bool = False, head: str = "lm") -> Path:
    """Write a random-init HF checkpoint of configs/model/MODEL.yaml with a TOKENIZER-kind
    tokenizer to OUT_DIR; the same seed gives bit-identical weights. Returns OUT_DIR.

    head="scalar" writes a reward model (*ForSequenceClassification, num_labels=1)."""
    from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification,
                              GenerationConfig)

    # Here, not at the top: hf_config pulls transformers' image/video utilities (torchvision,
    # ~2 s), which a run whose model already exists (prepare's check) must not pay.
    from mindrl.models.hf_config import hf_config_from_spec

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    out_dir = Path(out_dir).expanduser().resolve()
    _check_out_dir(out_dir, overwrite)
    spec = dataclasses.replace(load_model_spec(model), head=head)
    if spec.vision is not None:
        return _make_tiny_vl_model(spec, tokenizer, out_dir, seed, dtype, overwrite)
    tok = build_tokenizer(tokenizer)
    if len(tok) > spec.vocab_size:
        raise ValueError(
            f"tokenizer {tokenizer!r} has {len(tok)} tokens but model {model!r} has vocab_size "
            f"{spec.vocab_size} ({model_config_path(model)}); pick a model whose vocab_size is "
            f">= {len(tok)} (e.g. tiny-qwen2-qwen25vocab for qwen25) or raise vocab_size there")

    eos_ids = [tok.eos_token_id, tok.pad_token_id]  # <|im_end|> ends a turn, <|endoftext|> a text
    config = hf_config_from_spec(spec, torch_dtype="float32", bos_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                 initializer_range=INITIALIZER_RANGE)
    auto = AutoModelForSequenceClassification if head == "scalar" else AutoModelForCausalLM
    hf_model = auto.from_config(config, dtype=torch.float32)
    init_weights_(hf_model, seed)
    hf_model.to(DTYPES[dtype])
    hf_model.config.dtype = DTYPES[dtype]
    hf_model.generation_config = GenerationConfig(
        bos_token_id=tok.pad_token_id, eos_token_id=eos_ids, pad_token_id=tok.pad_token_id)

    with staged_dir(out_dir, overwrite, check=_check_out_dir) as tmp:
        hf_model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return out_dir


def _make_tiny_vl_model(spec, tokenizer: str, out_dir: Path, seed: int, dtype: str,
                        overwrite: bool) -> Path:
    """A vision-language shape: Qwen2_5_VLForConditionalGeneration with the hub-free char
    tokenizer, chat template and image processor (models/processors.py), whose token ids the
    config takes, so AutoProcessor, AutoModelForImageTextToText and vLLM load it offline."""
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from mindrl.models.hf_config import hf_config_from_spec
    from mindrl.models.processors import write_vl_tokenizer_and_processor

    if tokenizer != "char":
        raise ValueError(f"model {spec.name}: a vision-language model comes with the char "
                         f"tokenizer and its image processor only (tokenizer={tokenizer!r})")
    if spec.head != "lm":
        raise ValueError(f"model {spec.name}: a vision-language model has an lm head")
    with staged_dir(out_dir, overwrite, check=_check_out_dir) as tmp:
        ids = write_vl_tokenizer_and_processor(tmp)
        if ids["vocab_size"] > spec.vocab_size:
            raise ValueError(
                f"the VL tokenizer has {ids['vocab_size']} tokens but model {spec.name} has "
                f"vocab_size {spec.vocab_size} ({model_config_path(spec.name)}); raise it there")
        config = hf_config_from_spec(
            spec, torch_dtype="float32", bos_token_id=ids["bos_token_id"],
            eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"],
            initializer_range=INITIALIZER_RANGE, vision_token_ids=ids)
        hf_model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        init_weights_(hf_model, seed)
        hf_model.to(DTYPES[dtype])
        hf_model.config.dtype = DTYPES[dtype]
        hf_model.generation_config = GenerationConfig(
            bos_token_id=ids["bos_token_id"], eos_token_id=ids["generation_eos_token_ids"],
            pad_token_id=ids["pad_token_id"])
        hf_model.save_pretrained(tmp, safe_serialization=True)
    return out_dir
