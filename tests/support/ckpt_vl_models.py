"""A tiny Qwen2.5-VL HF directory for the converter tests: transformers' own model (the parity
worker's tiny config and init), saved with save_pretrained, plus processor and tokenizer files
written here (their bytes only have to travel unchanged)."""

import json
from pathlib import Path

from support.tiny_vl import tiny_vl_model

PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14,
                "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 3136,
                "max_pixels": 12845056, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "processor_class": "Qwen2_5_VLProcessor"}
CHAT_TEMPLATE = {"chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                                  "{{ m['content'] }}<|im_end|>\n{% endfor %}"}
# What a VL HF directory carries besides weights and config.json.
ASSET_FILES = ("preprocessor_config.json", "chat_template.json", "tokenizer.json",
               "tokenizer_config.json")


def save_vl_hf(out: Path, seed: int = 0, runtime_names: bool = False) -> Path:
    """save_pretrained of the seeded tiny VL model plus processor/tokenizer files. With
    runtime_names the safetensors hold a loaded model's names (model.language_model.*,
    model.visual.*, lm_head.weight when untied) instead of the on-disk ones."""
    from safetensors.torch import save_file

    from mindrl.models.tokenizers import build_tokenizer

    out = Path(out)
    model = tiny_vl_model(seed)
    model.save_pretrained(out)
    if runtime_names:
        state = {k: v.contiguous() for k, v in model.state_dict().items()
                 if not (k == "lm_head.weight" and model.config.tie_word_embeddings)}
        (out / "model.safetensors").unlink()
        save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    build_tokenizer("char").save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    (out / "chat_template.json").write_text(json.dumps(CHAT_TEMPLATE, indent=2))
    return out
