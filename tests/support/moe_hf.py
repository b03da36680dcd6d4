"""Tiny Qwen3-MoE checkpoints in both HF spellings of the experts: per expert (save_pretrained)
and stacked (a loaded model's state dict); the models are support.hf_reference's."""

import dataclasses
import json
from pathlib import Path

import torch

from mindrl.config.model_spec import load_model_spec


def moe_spec(dense_layers=(1,)):
    """tiny-qwen3-moe with `dense_layers` keeping a dense MLP (HF mlp_only_layers)."""
    spec = load_model_spec("tiny-qwen3-moe")
    return dataclasses.replace(spec, moe=dataclasses.replace(spec.moe,
                                                             dense_layers=tuple(dense_layers)))


def save_stacked(model, out: Path, fmt: str = "safetensors") -> Path:
    """The loaded model's own state dict (experts stacked [E, 2I, H] / [E, H, I]) and its
    config.json, without tokenizer: safetensors or a torch pickle (pytorch_model.bin)."""
    out = Path(out)
    out.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    else:
        torch.save(state, out / "pytorch_model.bin")
    config = model.config.to_dict()
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
