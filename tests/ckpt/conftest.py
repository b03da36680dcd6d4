"""Fixtures shared by the checkpoint tests."""

import warnings

import pytest
import torch

from mindrl.ckpt import mcore_io

from support.ckpt_hf_models import make_hf_model


@pytest.fixture
def fake_mcore(tmp_path):
    """A dist checkpoint's files (torch DCP, no Megatron needed) with MindRL's layout."""
    import torch.distributed.checkpoint as dcp

    from mindrl.models.hf_config import spec_from_hf_config

    root = tmp_path / "mg"
    ckpt = root / "release"
    with warnings.catch_warnings():  # DCP warns when torch.distributed is not up
        warnings.simplefilter("ignore")
        dcp.save({"decoder.final_layernorm.weight": torch.ones(128)}, checkpoint_id=str(ckpt))
    (ckpt / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    torch.save({"iteration": 0}, ckpt / "common.pt")
    config = make_hf_model("qwen2", True, 2, 126).config
    spec = spec_from_hf_config(config, "fake")
    (ckpt / mcore_io.MODEL_INFO).write_text(mcore_io.ModelInfo(spec, "fp32").to_json())
    (root / mcore_io.TRACKER).write_text("release")
    return root
