"""Which model a Megatron role builds: the text GPTModel, or a vision-language family whose
HF config (vision tower shape, vision token ids) the role's converted checkpoint records."""

from __future__ import annotations

from typing import Callable, Optional

from mindrl.config.model_spec import ModelSpec


def model_builder(spec: ModelSpec, load: Optional[str],
                  freeze_vision_tower: bool = False) -> Optional[Callable]:
    """MegatronEngine's `build_model`: None for a text model (its default GPTModel); for a
    Qwen2.5-VL spec, the family's builder over the HF config in `load`'s mindrl_model.json."""
    if spec.vision is None:
        return None
    if not load:
        raise ValueError(f"model {spec.name} has a vision tower: its role needs `load` (a "
                         f"checkpoint converted with --model-type-hf qwen2_5_vl, which records "
                         f"the tower's HF config)")
    from mindrl.ckpt.convert_checks import vl_hf_config
    from mindrl.ckpt.mcore_io import VISION_INFO, read_model_info, resolve_checkpoint_dir
    from mindrl.models.families import model_family

    ckpt = resolve_checkpoint_dir(load)
    vision = read_model_info(ckpt).extra.get(VISION_INFO)
    if not vision:
        raise ValueError(f"{ckpt}: a text checkpoint, but model {spec.name} has a vision tower; "
                         f"convert the VL model with --model-type-hf qwen2_5_vl")
    hf_config = vl_hf_config(vision["hf_config"], ckpt)
    divisible_by = spec.make_vocab_size_divisible_by
    family = model_family(spec.family)

    def build(_spec, parallel, params_dtype):
        return family.build(hf_config, parallel, params_dtype,
                            freeze_vision_tower=freeze_vision_tower,
                            make_vocab_size_divisible_by=divisible_by)
    return build
