"""Loading weights into Megatron models in tests: a converted checkpoint into a model of
another shape or head (error tests), and a transformers Qwen2.5-VL state dict into this
rank's stage (the VL parity and engine tests)."""

from megatron.core import parallel_state as ps

from mindrl.ckpt import mapping, mcore_io
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel


def load_error(spec, ckpt):
    """The McoreCheckpointError message of loading `ckpt` into a TP1 model of `spec`, or None
    when it loads (initialises and tears down model parallelism around the attempt)."""
    initialize_parallel(Parallelism())
    try:
        mcore_io.load_mcore_checkpoint(build_gpt_model(spec, Parallelism()), ckpt)
        return None
    except mcore_io.McoreCheckpointError as e:
        return str(e)
    finally:
        ps.destroy_model_parallel()


def load_hf_state_dict(model, hf_state: dict) -> None:
    """Load a transformers Qwen2_5_VLForConditionalGeneration state dict (loaded-model names
    `model.language_model.*` / `model.visual.*` or on-disk names `model.*` / `visual.*`) into
    a Qwen25VLModel's stage at parallel_state's ranks. The language model goes through
    ckpt/mapping's table; the vision tower is a plain copy. Builds the full language model
    once per rank: for models that fit in host memory (the converter streams the big ones)."""
    tp_rank, tp_size = (ps.get_tensor_model_parallel_rank(),
                        ps.get_tensor_model_parallel_world_size())
    pp_rank, pp_size = (ps.get_pipeline_model_parallel_rank(),
                        ps.get_pipeline_model_parallel_world_size())
    hf = {mapping.hf_disk_name(k): v for k, v in hf_state.items()}
    full = mapping.full_mcore_from_hf(hf, model.spec, tp_size)
    local = mapping.stage_state_dict(full, model.spec, tp_rank, tp_size, pp_rank, pp_size)
    if model.pre_process:
        local.update({k: v for k, v in hf.items() if mapping.is_vision_tensor(k)})
    missing, unexpected = model.load_state_dict(local, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise KeyError(f"Qwen2.5-VL weights do not fit this stage: missing {missing}, "
                       f"unexpected {unexpected}")
