"""The shipped Qwen2.5-VL shapes' vision numbers that no parameter count can check.

test_vl_spec.py pins 3B/7B/32B to the published parameter totals, but window_size and
fullatt_block_indexes (which blocks attend globally) own no parameters: a typo there loads the
published weights without a word and computes another model. transformers'
Qwen2_5_VLVisionConfig defaults are those of the Qwen release, an independent reference for them.
"""

import pytest

from mindrl.config.model_spec import load_model_spec

# Equal in every published Qwen2.5-VL size; intermediate_size (3420 / 3456) and
# out_hidden_size (the text width) differ by size and are pinned by the parameter count.
SHARED_VISION_KEYS = ("depth", "num_heads", "patch_size", "temporal_patch_size",
                      "spatial_merge_size", "window_size", "fullatt_block_indexes",
                      "in_channels")


@pytest.mark.parametrize("name", ["qwen25vl-3b", "qwen25vl-7b", "qwen25vl-32b"])
def test_published_vision_geometry_equals_transformers_reference(name):
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig

    reference = Qwen2_5_VLVisionConfig()
    vision = load_model_spec(name).vision
    def values(config):
        return {k: list(v) if isinstance(v, (tuple, list)) else v
                for k, v in ((k, getattr(config, k)) for k in SHARED_VISION_KEYS)}

    assert values(vision) == values(reference)
    # Qwen2.5-VL's vision tower is 1280 wide in every size (transformers' class default of
    # 3584 is the 7B text width, not a published tower width).
    assert vision.hidden_size == 1280


@pytest.mark.parametrize("name", ["qwen25vl-3b", "qwen25vl-7b", "qwen25vl-32b"])
def test_published_text_rope_is_qwen25_mrope(name):
    """Every published size: head_dim 128 split 16/24/24 (t, h, w), theta 1e6, eps 1e-6."""
    spec = load_model_spec(name)
    assert spec.head_dim == 128
    assert tuple(spec.mrope_section) == (16, 24, 24)
    assert spec.rotary_base == 1_000_000.0 and spec.norm_epsilon == 1e-6
    assert spec.vision.out_hidden_size == spec.hidden_size
