"""The converter's input checks: flags, HF configs and tensors, saved Megatron tensors.

Each raises ``ConversionError`` naming the file, tensor or flag and the fix, before the
converter writes anything.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from mindrl.ckpt import hf_io, mapping, mcore_io, registry
from mindrl.config.hf_files import IMAGE_PROCESSOR_FILES, PROCESSOR_FILES, has_image_processor
from mindrl.config.model_spec import ModelSpec, VisionSpec
from mindrl.config.pipeline_stages import split_problem

PARAMS_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
HF_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

# --model-type-hf -> config.json model_types it may convert, as the registered families
# declare them (mindrl/ckpt/mapping/<family>.py): the shipped ones, for the CLI's choices.
MODEL_TYPE_HF = registry.model_type_hf()


class ConversionError(ValueError):
    """Bad input or inconsistent flags; nothing was written."""


def params_dtype_name(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    key = _DTYPE_ALIASES.get(name, name)
    if key not in PARAMS_DTYPES:
        raise ConversionError(f"--params-dtype {name!r}: use one of {sorted(PARAMS_DTYPES)}")
    return key


def dtype_key(dtype: torch.dtype, where: str) -> str:
    for key, value in PARAMS_DTYPES.items():
        if value == dtype:
            return key
    raise ConversionError(f"{where}: dtype {dtype} is not a parameter dtype "
                          f"({', '.join(PARAMS_DTYPES)})")


def check_model_type_hf(model_type_hf: Optional[str], architecture: str, source: str,
                        architectures: Optional[List[str]] = None) -> None:
    """architecture: config.json's model_type; architectures: its class names, if known."""
    if model_type_hf is None:
        return
    accepts = registry.model_type_hf()
    if model_type_hf not in accepts:
        raise ConversionError(f"--model-type-hf {model_type_hf!r} is not supported; "
                              f"supported: {', '.join(accepts)}")
    if architecture not in accepts[model_type_hf]:
        right = [k for k, v in accepts.items() if architecture in v]
        classes = f", architectures {architectures}" if architectures else ""
        if any(_multimodal(t) for t in accepts[model_type_hf]):
            kind = " a text-only model, not a vision-language one;"
        elif _multimodal(architecture):
            kind = " a vision-language model, not a text-only one;"
        else:
            kind = ""
        use = (f"use --model-type-hf {' or '.join(right)}" if right else
               "that model type is not supported")
        raise ConversionError(f"--model-type-hf {model_type_hf} does not match {source} "
                              f"(model_type {architecture!r}{classes}):{kind} {use}")


def _multimodal(model_type: str) -> bool:
    """A registered vision-language family (a text decoder plus a vision tower)."""
    return (model_type in registry.model_types()
            and registry.mapping_of(model_type).multimodal)


def check_qkv_bias(add_qkv_bias: Optional[bool], spec: ModelSpec, source: str) -> None:
    if add_qkv_bias is None or add_qkv_bias == spec.add_qkv_bias:
        return
    if spec.add_qkv_bias:
        raise ConversionError(f"{source} has qkv biases ({spec.architecture}) but "
                              f"--add-qkv-bias is not set; add --add-qkv-bias")
    raise ConversionError(f"--add-qkv-bias is set but {source} has no qkv biases "
                          f"({spec.architecture}); drop --add-qkv-bias")


def check_parallel_sizes(spec: ModelSpec, tp: int, pp: int, ep: int = 1,
                         first_stage_layers: Optional[int] = None,
                         last_stage_layers: Optional[int] = None) -> None:
    """Megatron's own divisibility rules, checked before any work. A MoE model's experts are
    split over TP like a dense MLP (expert TP = TP) and dealt out over EP; the layers over PP
    evenly, or with the first / last stage's own count (config/pipeline_stages.py)."""
    if tp < 1 or pp < 1 or ep < 1:
        raise ConversionError(f"parallel sizes must be >= 1 (TP={tp}, PP={pp}, EP={ep})")
    sizes = [("num_attention_heads", spec.num_attention_heads),
             ("num_query_groups (num_key_value_heads)", spec.num_query_groups),
             ("ffn_hidden_size (intermediate_size)", spec.ffn_hidden_size)]
    if spec.moe is not None:
        sizes.append(("moe.ffn_hidden_size (moe_intermediate_size)", spec.moe.ffn_hidden_size))
    for what, value in sizes:
        if value % tp:
            raise ConversionError(f"--target-tensor-parallel-size {tp} does not divide "
                                  f"{what}={value} of {spec.name}")
    uneven = (first_stage_layers, last_stage_layers) != (None, None)
    if not uneven and spec.num_layers % pp:
        raise ConversionError(f"--target-pipeline-parallel-size {pp} does not divide "
                              f"num_layers={spec.num_layers} of {spec.name}; or give the first "
                              f"and last stages their own counts "
                              f"(--decoder-first/last-pipeline-num-layers)")
    problem = uneven and split_problem(spec.num_layers, pp, first_stage_layers,
                                       last_stage_layers)
    if problem:
        raise ConversionError(f"--decoder-first-pipeline-num-layers {first_stage_layers} / "
                              f"--decoder-last-pipeline-num-layers {last_stage_layers} do not "
                              f"fit num_layers={spec.num_layers} of {spec.name} over "
                              f"--target-pipeline-parallel-size {pp}: {problem}")
    experts = spec.moe.num_experts if spec.moe is not None else None
    if ep > 1 and experts is None:
        raise ConversionError(f"--target-expert-parallel-size {ep}: {spec.name} has no "
                              f"experts; use 1")
    if experts is not None and experts % ep:
        raise ConversionError(f"--target-expert-parallel-size {ep} does not divide "
                              f"moe.num_experts (num_experts)={experts} of {spec.name}; "
                              f"use a divisor of {experts}")


# The `moe:` fields of a model yaml and the config.json keys (HF Qwen3-MoE) they come from.
MOE_HF_KEYS = {"num_experts": "num_experts", "router_topk": "num_experts_per_tok",
               "ffn_hidden_size": "moe_intermediate_size", "norm_topk_prob": "norm_topk_prob",
               "dense_layers": "mlp_only_layers"}
# Fields a converter's output does not take from the yaml (kv_channels: compared as head_dim).
_NOT_SHAPE = ("name", "make_vocab_size_divisible_by", "kv_channels", "moe")


def check_model_yaml(spec: ModelSpec, model: Optional[str], source: str) -> None:
    """--model NAME: the checkpoint's shape must be configs/model/NAME.yaml's (the shape the
    recipe trains), checked before any work; each difference named by its yaml key (and a
    MoE field by its config.json key too)."""
    if model is None:
        return
    from mindrl.config.model_spec import load_model_spec
    from mindrl.paths import model_config_path

    try:
        want = load_model_spec(model)
    except (FileNotFoundError, ValueError) as e:
        raise ConversionError(f"--model: {e}") from None
    yaml = model_config_path(model)
    wrong = [f"{key}: {got} here, {expected} in the yaml"
             for key, (got, expected) in _shape_diff(spec, want).items()]
    if wrong:
        raise ConversionError(f"{source} is not the model --model {model} describes ({yaml}): "
                              f"{'; '.join(wrong)}; pass the --model whose yaml matches this "
                              f"checkpoint, or convert the checkpoint {yaml.name} describes")


def _shape_diff(got: ModelSpec, want: ModelSpec) -> Dict[str, Tuple]:
    """{yaml key (config.json key for a MoE field): (got, wanted)} where two specs differ."""
    diff = {f.name: (getattr(got, f.name), getattr(want, f.name))
            for f in dataclasses.fields(got)
            if f.name not in _NOT_SHAPE and getattr(got, f.name) != getattr(want, f.name)}
    if got.head_dim != want.head_dim:
        diff["kv_channels (head_dim)"] = (got.head_dim, want.head_dim)
    if (got.moe is None) != (want.moe is None):
        diff["moe"] = (got.moe, want.moe)
    elif got.moe is not None:
        diff.update({f"moe.{k} ({hf})": (getattr(got.moe, k), getattr(want.moe, k))
                     for k, hf in MOE_HF_KEYS.items()
                     if getattr(got.moe, k) != getattr(want.moe, k)})
    return diff


def tokenizer_source(tokenizer_model: Optional[str], default: Optional[Path]) -> Optional[Path]:
    """--tokenizer-model may name a tokenizer file (guide: .../tokenizer.json) or its folder."""
    if tokenizer_model is None:
        if default is not None and any((default / n).is_file() for n in hf_io.TOKENIZER_FILES):
            return default
        return None
    path = Path(tokenizer_model).expanduser().resolve()
    if not path.exists():
        raise ConversionError(f"--tokenizer-model {path} does not exist")
    folder = path if path.is_dir() else path.parent
    if not any((folder / n).is_file() for n in hf_io.TOKENIZER_FILES):
        raise ConversionError(f"--tokenizer-model {path}: no tokenizer files there "
                              f"(expected one of {', '.join(hf_io.TOKENIZER_FILES)})")
    return folder


def check_tokenizer_fits(folder: Optional[Path], spec: ModelSpec) -> None:
    if folder is None or not (folder / "tokenizer.json").is_file():
        return
    from tokenizers import Tokenizer

    size = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size(True)
    if size > spec.vocab_size:
        raise ConversionError(f"tokenizer {folder / 'tokenizer.json'} has {size} tokens but the "
                              f"model has vocab_size {spec.vocab_size}")


def read_hf_config(load_dir: Path) -> dict:
    path = load_dir / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path} is missing: the HF config decides the model shape")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from e


def spec_from_config(config: dict, name: str, source: Path, divisible_by: int) -> ModelSpec:
    from mindrl.models.hf_config import spec_from_hf_config

    try:
        return spec_from_hf_config(config, name, make_vocab_size_divisible_by=divisible_by)
    except (ValueError, TypeError, AttributeError) as e:
        raise ConversionError(f"{source}: {e}") from e


def is_vl_config(config: dict) -> bool:
    return _multimodal(config.get("model_type"))


def vl_hf_config(config: dict, source):
    """transformers' config object of a VL config.json (what the model builder takes)."""
    from transformers import AutoConfig

    body = dict(config)
    try:
        return AutoConfig.for_model(body.pop("model_type"), **body)
    except (ValueError, TypeError, KeyError) as e:
        raise ConversionError(f"{source}: not a valid {config.get('model_type')} config "
                              f"({e})") from e


def model_from_config(config: dict, name: str, source: Path, divisible_by: int
                      ) -> Tuple[ModelSpec, Optional[VisionSpec]]:
    """(language-model spec, vision tower or None) of an HF config.json."""
    if not is_vl_config(config):
        return spec_from_config(config, name, source, divisible_by), None
    if not isinstance(config.get("vision_config"), dict):
        raise ConversionError(f"{source}: model_type {config['model_type']!r} but no "
                              f"vision_config")
    family = registry.family(config["model_type"]).model
    hf_config = vl_hf_config(config, source)
    try:
        spec = family.text_spec(hf_config, name, make_vocab_size_divisible_by=divisible_by)
        return spec, family.vision_spec(hf_config)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise ConversionError(f"{source}: {e}") from e


def vl_processor_source(tokenizer_model: Optional[str], tokenizer_dir: Optional[Path],
                        own: Path, output: Path, fix: str
                        ) -> Tuple[Optional[Path], Optional[str]]:
    """(folder whose processor files travel, or None; the note when none do) for a VL model.

    The files come from the --tokenizer-model folder when it holds an image processor, else
    from the input's own folder `own`. Without any, weights and config still convert (as a
    text model without a tokenizer does) and the one note says where the processor is needed
    and how to add it: it is checked where it is used (the recipe check before training,
    models.processors.load_vl_processor). An image processor without its tokenizer is an
    incomplete processor: refused, `fix` saying how to complete it.
    """
    folders = ([tokenizer_dir] if tokenizer_model is not None and tokenizer_dir else []) + [own]
    found = next((f for f in folders if has_image_processor(f)), None)
    if found is not None:
        if tokenizer_dir is None:
            image = next(found / n for n in IMAGE_PROCESSOR_FILES if (found / n).is_file())
            raise ConversionError(f"{own / 'tokenizer.json'} is missing: a vision-language "
                                  f"model's processor ({image}) needs its tokenizer; {fix} "
                                  f"(or pass --tokenizer-model)")
        return found, None
    lacking = "processor or tokenizer files" if tokenizer_dir is None else "processor files"
    carried = "weights and config" + ("" if tokenizer_dir is None else " and the tokenizer")
    return None, (f"no {lacking} in {own} ({' or '.join(IMAGE_PROCESSOR_FILES)}): {output} "
                  f"gets {carried} only; training and data preprocessing load the processor "
                  f"from tokenizer_name_or_path, so pass --tokenizer-model with the original HF "
                  f"model's folder, or copy its tokenizer and processor files "
                  f"({', '.join(PROCESSOR_FILES)}) into the folder that key names")


def check_hf_tensors(weights: hf_io.HFWeights, spec: ModelSpec, notes: List[str],
                     vision: Optional[VisionSpec] = None) -> None:
    """Every tensor the config implies exists with its shape; nothing else would be dropped."""
    expected = set()
    for rule, layer in mapping.iter_rules(spec, vision):
        for name, shape in zip(rule.hf_names(layer), mapping.expected_hf_shapes(rule, spec)):
            expected.add(name)
            if name not in weights:
                raise ConversionError(f"{weights.directory}: tensor {name!r} (shape "
                                      f"{tuple(shape)}) is missing from the weights")
            if weights.shape(name) != tuple(shape):
                raise ConversionError(
                    f"{weights.file_of(name)}: tensor {name!r} has shape "
                    f"{weights.shape(name)} but config.json implies {tuple(shape)}")
            if not weights.dtype(name).is_floating_point:
                raise ConversionError(f"{weights.file_of(name)}: tensor {name!r} has dtype "
                                      f"{weights.dtype(name)}, expected floating point")
    for name in weights.names():
        if name in expected or mapping.is_derived_hf_tensor(name):
            continue
        tied_head = mapping.OUTPUT.hf[0]
        if name == tied_head and spec.tied_embeddings:
            embed = mapping.EMBEDDING.hf[0]
            if not torch.equal(weights.get(name), weights.get(embed)):
                raise ConversionError(f"{weights.file_of(name)}: config.json ties embeddings "
                                      f"but {name!r} differs from {embed!r}")
            notes.append(f"{name} equals {embed} (tied); not stored twice")
            continue
        if mapping.is_vision_tensor(name) and vision is None:
            raise ConversionError(f"{weights.file_of(name)}: unexpected vision tensor {name!r} "
                                  f"in a text-only {spec.architecture} model (config.json "
                                  f"model_type {spec.architecture!r}): it would be dropped")
        what = f"{vision.family} (vision-language)" if vision else spec.architecture
        raise ConversionError(f"{weights.file_of(name)}: unexpected tensor {name!r}: not part "
                              f"of a {what} model with this config.json (it would be "
                              f"dropped)")


def check_saved_tensors(sharded: Dict, saved: Dict[str, Tuple], ckpt: Path) -> None:
    """Each tensor the model needs is in the checkpoint with its global shape (vocab rows may
    differ by padding)."""
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

    for name, sh in sharded.items():
        if isinstance(sh, ShardedTensorFactory):
            sh = sh.build()[0]
        if not isinstance(sh, ShardedTensor):
            continue
        if sh.key not in saved:
            raise ConversionError(f"{ckpt}: tensor {sh.key!r} (for {name}) is not in the "
                                  f"checkpoint")
        shape, _ = saved[sh.key]
        want = tuple(sh.global_shape)
        if sh.key in mcore_io.VOCAB_KEYS:
            ok = shape[1:] == want[1:] and shape[0] >= 1
        else:
            ok = shape == want
        if not ok:
            raise ConversionError(f"{ckpt}: tensor {sh.key!r} has shape {shape} but "
                                  f"{mcore_io.MODEL_INFO} implies {want}")
