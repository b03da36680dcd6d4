"""A VL model's sync plan without vLLM: buckets never split what vLLM fuses in the vision
tower (gate_proj + up_proj -> gate_up_proj), text models keep their Megatron modules, every
tensor fits the point-to-point header (the 5-D patch embedding), and vLLM's shared weights
are found under HF names through the model's own prefix renames."""

import torch

from mindrl.ckpt import mapping
from mindrl.engines.vllm_engine import SharedWeights
from mindrl.models.hf_config import spec_from_hf_config
from mindrl.weight_sync import source
from mindrl.weight_sync.plan import plan_buckets, plan_units
from support.tiny_vl import tiny_vl_config


def vl_spec():
    return spec_from_hf_config(tiny_vl_config(), "tiny-vl")


def test_small_buckets_keep_each_vision_mlp_whole():
    spec = vl_spec()
    units = plan_units(spec, pp_size=1)
    gate = units[[u.rule.mcore for u in units].index("visual.blocks.0.mlp.gate_proj.weight")]
    buckets = plan_buckets(units, bucket_numel=gate.numel // 2)   # smaller than one tensor
    where = {u.rule.mcore: i for i, b in enumerate(buckets) for u in b}
    for n in range(spec.vision.depth):
        mlp = [where[f"visual.blocks.{n}.mlp.{p}.{k}"] for p in ("gate_proj", "up_proj")
               for k in ("weight", "bias")]
        qkv = [where[f"visual.blocks.{n}.attn.qkv.{k}"] for k in ("weight", "bias")]
        assert len(set(mlp)) == 1 and len(set(qkv)) == 1, (n, mlp, qkv)
    assert sum(len(b) for b in buckets) == len(units)


def test_text_units_keep_their_megatron_modules():
    spec = vl_spec()
    for unit in plan_units(spec, pp_size=2):
        if not mapping.is_vision_tensor(unit.rule.mcore):
            assert unit.module == unit.rule.mcore_name(unit.layer).rsplit(".", 1)[0]


def test_every_vl_tensor_fits_the_header():
    shapes = [s for u in plan_units(vl_spec(), 1)
              for s in mapping.expected_hf_shapes(u.rule, vl_spec())]
    assert max(len(s) for s in shapes) == 5            # the patch embedding
    assert max(len(s) for s in shapes) <= source._MAX_DIMS


def test_shared_weights_are_found_under_hf_names():
    places = {"language_model.model.norm.weight": (0, (4,)), "visual.merger.ln_q.weight": (4, (2,)),
              "language_model.lm_head.weight": (6, (2, 2))}
    renames = (("model.language_model.", "language_model.model."), ("model.visual.", "visual."),
               ("lm_head.", "language_model.lm_head."), ("model.", "language_model.model."))
    shared = SharedWeights("/dev/shm/x", 10, torch.float32, places, renames)
    assert shared.place("model.norm.weight") == (0, (4,))
    assert shared.place("model.language_model.norm.weight") == (0, (4,))
    assert shared.place("visual.merger.ln_q.weight") == (4, (2,))
    assert shared.place("lm_head.weight") == (6, (2, 2))
    assert shared.place("language_model.model.norm.weight") == (0, (4,))
