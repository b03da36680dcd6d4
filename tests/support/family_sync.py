"""What a model family's sync test starts from (tests/weight_sync/test_<family>_sync.py): a tiny
model converted HF -> Megatron -> HF for vLLM to load, and other weights for Megatron to sync
into it."""

from transformers import AutoModelForCausalLM

from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.distributed import spawn_local
from mindrl.models.tiny import make_tiny_model

from support.ckpt_convert_worker import run_conversions


def converted_and_trained(root, model: str, model_type_hf: str):
    """(spec, the converted-back HF dir, another seed's HF dir, its full Megatron state at
    TP 2) of configs/model/`model`."""
    spec = load_model_spec(model)
    source = make_tiny_model(model, "char", root / "hf", seed=0)
    spawn_local(run_conversions, 1, [
        ("hf2mg", dict(load_dir=source, save_dir=root / "mg", model_type_hf=model_type_hf,
                       add_qkv_bias=False)),
        ("mg2hf", dict(load_dir=root / "mg", save_dir=root / "back"))])
    layout_dir = make_tiny_model(model, "char", root / "trained", seed=11)
    full = mapping.full_mcore_from_hf(
        AutoModelForCausalLM.from_pretrained(layout_dir).state_dict(), spec, 2)
    return spec, root / "back", layout_dir, full


def sync_generate_config(infer_tp: int = 1) -> GenerateConfig:
    return GenerateConfig(max_num_seqs=8, max_model_len=128, kv_cache_memory_bytes=32 * 2**20,
                          infer_tensor_parallel_size=infer_tp,
                          sampling_config=SamplingConfig(max_tokens=12, temperature=1.0))
