"""HF <-> Megatron-core checkpoint conversion, streamed layer by layer.

Both directions first *plan*: every input file, tensor name, shape and flag is checked and
the output directory is vetted before anything is written; a bad input is a
``ConversionError`` that names the file, tensor or flag. Then they run in one process (a gloo
world of 1, TP1 PP1) and write into a staging directory renamed into place at the end.

HF -> mcore builds the Megatron model without initialising it and saves one torch_dist
checkpoint (mcore_io) that loads at any TP/PP; --target-tensor/pipeline-parallel-size are
checked against the model and recorded, not baked into files. mcore -> HF streams
safetensors shards. Either way a tensor whose bytes need no transform (all of them when the
dtype is kept: copy_plan) is copied from file to file, never held in memory; the others go
through one reused buffer, one tensor at a time. Names and layouts come from mapping only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import torch

from mindrl.ckpt import copy_plan, distcp_reader, fastio, hf_io, mapping, mcore_io, registry
from mindrl.ckpt.convert_checks import (HF_DTYPE_NAMES, PARAMS_DTYPES,
                                        ConversionError, check_hf_tensors,
                                        check_model_type_hf, check_model_yaml,
                                        check_parallel_sizes,
                                        check_qkv_bias, check_saved_tensors,
                                        check_tokenizer_fits, dtype_key, model_from_config,
                                        params_dtype_name, read_hf_config, tokenizer_source,
                                        vl_hf_config, vl_processor_source)
from mindrl.config.hf_files import PROCESSOR_FILES
from mindrl.config.model_spec import ModelSpec, VisionSpec
from mindrl.staging import SaveDirError, check_save_dir, staged_dir


def _steps(spec: ModelSpec, vision: Optional[VisionSpec] = None
           ) -> List[Tuple[str, List[Tuple[mapping.TensorRule, Optional[int]]]]]:
    """iter_rules grouped into the units streamed at once: embedding, each layer, the end,
    a VL model's vision tower (still written one tensor at a time)."""
    steps = []
    for _, group in itertools.groupby(
            mapping.iter_rules(spec, vision),
            key=lambda rl: (rl[1], mapping.is_vision_tensor(rl[0].mcore))):
        group = list(group)
        layer = group[0][1]
        if layer is not None:
            label = f"layer {layer}"
        elif mapping.is_vision_tensor(group[0][0].mcore):
            label = "vision tower"
        else:
            label = "embedding" if group[0][0] is mapping.EMBEDDING else "final norm/output"

        steps.append((label, group))
    return steps


@contextlib.contextmanager
def single_process_megatron() -> Iterator[None]:
    """torch.distributed (world of 1, unless one is already up) + parallel_state TP1 PP1.

    For converter processes only: it replaces any parallel_state the process had.
    """
    import torch.distributed as dist

    from mindrl import device
    from mindrl.models.builder import Parallelism, initialize_parallel

    created = False
    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise ConversionError(f"the converter runs in one process; torch.distributed is up "
                                  f"with world size {dist.get_world_size()}")
    else:
        device.init_distributed(0, 1)
        created = True
    try:
        initialize_parallel(Parallelism())
        yield
    finally:
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        if created:
            dist.destroy_process_group()


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, dynamic_ncols=True)


# ------------------------------------------------------------------ HF -> mcore

@dataclass
class HFToMcorePlan:
    load_dir: Path
    save_dir: Path
    spec: ModelSpec
    params_dtype: str
    tp: int
    pp: int
    weights: hf_io.HFWeights
    tokenizer_dir: Optional[Path]
    overwrite: bool
    notes: List[str] = field(default_factory=list)
    vision: Optional[VisionSpec] = None  # a VL model's vision tower
    hf_config: Optional[dict] = None              # config.json (a VL model's build needs it)
    processor_dir: Optional[Path] = None          # a VL model's processor files, if any
    ep: int = 1                                   # expert-parallel size checked (MoE)
    first_stage_layers: Optional[int] = None      # uneven pipeline stages checked
    last_stage_layers: Optional[int] = None


def _build_model(spec: ModelSpec, vision: Optional[VisionSpec],
                 hf_config: Optional[dict], params_dtype: str):
    """The TP1 PP1 model, uninitialised, for its checkpoint layout only."""
    from mindrl.models.builder import Parallelism, build_gpt_model

    if vision is None:
        return build_gpt_model(spec, Parallelism(), params_dtype, perform_initialization=False)
    family = registry.family(vision.family).model
    return family.build(vl_hf_config(hf_config, "config.json"), Parallelism(), params_dtype,
                        make_vocab_size_divisible_by=spec.make_vocab_size_divisible_by,
                        perform_initialization=False)


def plan_hf_to_mcore(load_dir, save_dir, *, tp: int = 1, pp: int = 1,
                     params_dtype: Optional[str] = None, model_type_hf: Optional[str] = None,
                     add_qkv_bias: Optional[bool] = None, tokenizer_model: Optional[str] = None,
                     make_vocab_size_divisible_by: int = 1, overwrite: bool = False,
                     ep: int = 1, model: Optional[str] = None,
                     first_stage_layers: Optional[int] = None,
                     last_stage_layers: Optional[int] = None) -> HFToMcorePlan:
    """Check everything about an HF -> mcore conversion; writes nothing.

    add_qkv_bias / model_type_hf None means "do not check" (library use); the CLI passes both.
    params_dtype None keeps the dtype of the HF weights. ep: the expert-parallel size the
    checkpoint must support (checked, recorded; like TP/PP not baked in). model: a
    configs/model name whose shape the HF config must have. first/last_stage_layers: an
    uneven pipeline's first / last stage counts (checked, recorded).
    """
    load_dir = Path(load_dir).expanduser().resolve()
    save_dir = Path(save_dir).expanduser().resolve()
    if not load_dir.is_dir():
        raise ConversionError(f"--load-dir {load_dir} is not a directory")
    config = read_hf_config(load_dir)
    if config.get("model_type") is None:
        raise ConversionError(f"{load_dir / 'config.json'} has no model_type")
    check_model_type_hf(model_type_hf, config["model_type"], str(load_dir / "config.json"),
                        config.get("architectures"))
    spec, vision = model_from_config(config, load_dir.name, load_dir / "config.json",
                                     make_vocab_size_divisible_by)
    check_qkv_bias(add_qkv_bias, spec, str(load_dir))
    check_model_yaml(spec, model, str(load_dir / "config.json"))
    check_parallel_sizes(spec, tp, pp, ep, first_stage_layers, last_stage_layers)
    dtype = params_dtype_name(params_dtype)
    try:
        check_save_dir(save_dir, overwrite, load_dir)
    except SaveDirError as e:
        raise ConversionError(str(e)) from None
    tokenizer_dir = tokenizer_source(tokenizer_model, load_dir)
    notes: List[str] = []
    processor_dir = None
    if vision is not None:
        processor_dir, note = vl_processor_source(
            tokenizer_model, tokenizer_dir, load_dir, save_dir,
            f"copy it from the original model download into {load_dir}")
        notes += [note] if note else []
    elif tokenizer_dir is None:
        notes.append(f"no tokenizer in {load_dir}: none is carried (mcore -> hf writes "
                     f"weights and config; --tokenizer-model adds one)")
    check_tokenizer_fits(tokenizer_dir, spec)
    try:
        # A VL checkpoint saved from a loaded model names its tensors model.language_model.*
        # / model.visual.*: read as the on-disk names.
        # A MoE layer's experts saved from a loaded model are stacked: read per expert.
        weights = hf_io.HFWeights.open(load_dir, rename=mapping.hf_disk_name if vision else None,
                                       split=mapping.hf_split(spec))
    except hf_io.HFCheckpointError as e:
        raise ConversionError(str(e)) from None
    try:
        check_hf_tensors(weights, spec, notes, vision)
        if dtype is None:
            embed = mapping.EMBEDDING.hf[0]
            dtype = dtype_key(weights.dtype(embed), str(weights.file_of(embed)))
    except BaseException:
        weights.close()
        raise
    return HFToMcorePlan(load_dir, save_dir, spec, dtype, tp, pp, weights, tokenizer_dir,
                         overwrite, notes, vision, config if vision is not None else None,
                         processor_dir, ep, first_stage_layers, last_stage_layers)


def run_hf_to_mcore(plan: HFToMcorePlan, progress: bool = True) -> Path:
    """Execute a checked plan; returns the checkpoint root (== plan.save_dir)."""
    spec, vision = plan.spec, plan.vision

    def hf_assets(folder: Path) -> None:
        hf_io.copy_files(plan.load_dir, folder, hf_io.CONFIG_FILES)
        if plan.tokenizer_dir is not None:
            hf_io.copy_files(plan.tokenizer_dir, folder, hf_io.TOKENIZER_FILES)
        if plan.processor_dir is not None:
            hf_io.copy_files(plan.processor_dir, folder, PROCESSOR_FILES)

    layout = {"tensor_model_parallel_size": plan.tp, "pipeline_model_parallel_size": plan.pp}
    if spec.moe is not None:
        layout["expert_model_parallel_size"] = plan.ep
    for key, count in (("decoder_first_pipeline_num_layers", plan.first_stage_layers),
                       ("decoder_last_pipeline_num_layers", plan.last_stage_layers)):
        if count is not None:
            layout[key] = count
    extra = {"source": {"hf_dir": str(plan.load_dir)}, "validated_layouts": [layout]}
    if vision is not None:
        extra.update(mcore_io.vision_info(vision.family, plan.hf_config))
    try:
        with single_process_megatron(), staged_dir(plan.save_dir, plan.overwrite) as tmp:
            # Built for its checkpoint layout only: its parameters are never initialised nor
            # filled. The save asks for each parameter just before writing it and gets where
            # its bytes lie in the HF files (copied file to file: copy_plan), or, where it
            # must be computed (a cast, a torch pickle), the parameter filled from the HF
            # files in a reused buffer: at most one parameter in memory at a time.
            model = _build_model(spec, vision, plan.hf_config, plan.params_dtype)
            rules = {rule.mcore_name(layer): (rule, layer)
                     for rule, layer in mapping.iter_rules(spec, vision)}
            unfilled = sorted(set(dict(model.named_parameters())) - set(rules))
            if unfilled:
                raise RuntimeError(f"mapping left Megatron parameters unfilled: {unfilled}")
            with _progress(len(rules), "hf->mcore", progress) as bar:
                def fill(name: str, out: torch.Tensor) -> None:
                    rule, layer = rules[name]
                    bar.set_postfix_str(name, refresh=False)
                    # HF bytes go straight into the buffer where the layout allows.
                    views = mapping.mcore_part_views(rule, out, spec)
                    for hf_name, view in zip(rule.hf_names(layer), views):
                        plan.weights.read_into(hf_name, view)
                    if rule.vocab:
                        out[spec.vocab_size:].zero_()
                    bar.update()

                def pieces(name: str, param: torch.Tensor):
                    rule, layer = rules[name]
                    found = copy_plan.mcore_pieces(rule, layer, spec, tuple(param.shape),
                                                   param.dtype, plan.weights)
                    if found is not None:
                        bar.set_postfix_str(name, refresh=False)
                        bar.update()
                    return found

                mcore_io.save_mcore_checkpoint(model, tmp, spec, plan.params_dtype,
                                               hf_assets=hf_assets, extra_info=extra,
                                               checksums=False, fill=fill, pieces=pieces)
            del model
    finally:
        plan.weights.close()
    return plan.save_dir


def hf_to_mcore(load_dir, save_dir, progress: bool = True, **options) -> Path:
    """Plan (all checks) then convert; see plan_hf_to_mcore for the options."""
    return run_hf_to_mcore(plan_hf_to_mcore(load_dir, save_dir, **options), progress)


# ------------------------------------------------------------------ mcore -> HF

@dataclass
class McoreToHFPlan:
    ckpt_dir: Path
    save_dir: Path
    spec: ModelSpec
    saved_dtype: str
    params_dtype: str
    config_text: str
    generation_config: Optional[Path]
    tokenizer_dir: Optional[Path]  # None: weights and config only, as the HF input had
    max_shard_bytes: int
    overwrite: bool
    notes: List[str] = field(default_factory=list)
    vision: Optional[VisionSpec] = None
    hf_config: Optional[dict] = None   # a VL model's recorded config.json
    processor_dir: Optional[Path] = None   # a VL model's processor files, if any


def _recorded_vision(ckpt: Path, info: mcore_io.ModelInfo
                     ) -> Tuple[Optional[VisionSpec], Optional[dict]]:
    """A VL checkpoint's vision tower and HF config, as recorded in mindrl_model.json."""
    recorded = info.extra.get(mcore_io.VISION_INFO)
    if recorded is None:
        return None, None
    source = ckpt / mcore_io.MODEL_INFO
    config = recorded.get("hf_config") if isinstance(recorded, dict) else None
    if not isinstance(config, dict):
        raise ConversionError(f"{source}: '{mcore_io.VISION_INFO}' has no hf_config (the HF "
                              f"config.json of the model)")
    spec, vision = model_from_config(config, info.spec.name, source,
                                     info.spec.make_vocab_size_divisible_by)
    if vision is None or spec != info.spec:
        raise ConversionError(f"{source}: its vision hf_config does not describe the model "
                              f"recorded in 'spec'")
    return vision, config


def _hf_config_text(ckpt: Path, spec: ModelSpec, out_dtype: str,
                    recorded: Optional[dict] = None,
                    recorded_vision: Optional[VisionSpec] = None) -> str:
    """The checkpoint's own HF config (byte for byte when the dtype is unchanged), checked
    against the spec; else the recorded one (a VL model) or one generated from the spec."""
    path = ckpt / mcore_io.HF_ASSETS / "config.json"
    hf_dtype = HF_DTYPE_NAMES[out_dtype]
    if not path.is_file() and recorded is not None:
        text = json.dumps(recorded, indent=2, sort_keys=True) + "\n"
    elif not path.is_file():
        from mindrl.models.hf_config import hf_config_from_spec

        config = hf_config_from_spec(spec, torch_dtype=hf_dtype)
        return config.to_json_string(use_diff=False)
    else:
        text = path.read_text()
    config = json.loads(text)
    again, vision = model_from_config(config, spec.name, path, spec.make_vocab_size_divisible_by)
    if vision != recorded_vision:
        raise ConversionError(f"{path} (model_type {config.get('model_type')!r}) disagrees "
                              f"with {ckpt / mcore_io.MODEL_INFO} about the vision tower: "
                              f"{vision} (config), {recorded_vision} (checkpoint)")
    if again != spec:
        diff = {k: (v, getattr(spec, k)) for k, v in again.to_dict().items()
                if getattr(spec, k) != v}
        raise ConversionError(f"{path} disagrees with {ckpt / mcore_io.MODEL_INFO}: "
                              f"{diff} (config, checkpoint)")
    keys = [k for k in ("dtype", "torch_dtype") if k in config]
    if all(config[k] == hf_dtype for k in keys) and keys:
        return text
    for k in keys or ["dtype"]:
        config[k] = hf_dtype
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def plan_mcore_to_hf(load_dir, save_dir, *, params_dtype: Optional[str] = None,
                     model_type_hf: Optional[str] = None, add_qkv_bias: Optional[bool] = None,
                     tokenizer_model: Optional[str] = None, max_shard_size: str = "5GB",
                     tp: int = 1, pp: int = 1, overwrite: bool = False,
                     model: Optional[str] = None) -> McoreToHFPlan:
    """Check everything about an mcore -> HF conversion; writes nothing (model: a
    configs/model name whose shape the checkpoint must have)."""
    if (tp, pp) != (1, 1):
        raise ConversionError(f"HF output is one unsharded model: use "
                              f"--target-tensor-parallel-size 1 --target-pipeline-parallel-size "
                              f"1 (got TP={tp}, PP={pp})")
    save_dir = Path(save_dir).expanduser().resolve()
    try:
        ckpt = mcore_io.resolve_checkpoint_dir(load_dir)
        info = mcore_io.read_model_info(ckpt)
        saved = mcore_io.check_checkpoint_files(ckpt)
        check_save_dir(save_dir, overwrite, Path(load_dir))
    except (mcore_io.McoreCheckpointError, SaveDirError) as e:
        raise ConversionError(str(e)) from None
    spec = info.spec
    vision, recorded = _recorded_vision(ckpt, info)
    stray = sorted(k for k in saved if mapping.is_vision_tensor(k))
    if vision is None and stray:
        raise ConversionError(
            f"{ckpt}: holds vision tensors ({stray[0]}, ... {len(stray)} in all) but "
            f"{mcore_io.MODEL_INFO} records no vision tower ('{mcore_io.VISION_INFO}'): they "
            f"would be dropped; a VL checkpoint's save must record it "
            f"(mcore_io.vision_info)")
    check_model_type_hf(model_type_hf, vision.family if vision else spec.architecture,
                        str(ckpt / mcore_io.MODEL_INFO))
    check_qkv_bias(add_qkv_bias, spec, str(ckpt))
    check_model_yaml(spec, model, str(ckpt / mcore_io.MODEL_INFO))
    saved_dtype = params_dtype_name(info.params_dtype)
    out_dtype = params_dtype_name(params_dtype) or saved_dtype
    try:
        max_bytes = hf_io.parse_size(max_shard_size)
    except ValueError as e:
        raise ConversionError(f"--max-shard-size: {e}") from None
    # A checkpoint converted from an HF folder without a tokenizer (or a VL model's processor)
    # carries none; the way back then gives what went in (weights and config), with a note.
    assets = ckpt / mcore_io.HF_ASSETS
    tokenizer_dir = tokenizer_source(tokenizer_model, assets)
    notes: List[str] = []
    processor_dir = None
    if vision is not None:
        processor_dir, note = vl_processor_source(
            tokenizer_model, tokenizer_dir, assets, save_dir,
            f"convert again from an HF directory that has it, or copy it from the original "
            f"model download into {assets}")
        notes += [note] if note else []
    elif tokenizer_dir is None:
        notes.append(f"no tokenizer carried: {ckpt} has none, so {save_dir} gets weights and "
                     f"config only; --tokenizer-model (a tokenizer.json or its folder) adds one")
    check_tokenizer_fits(tokenizer_dir, spec)
    generation = ckpt / mcore_io.HF_ASSETS / "generation_config.json"
    return McoreToHFPlan(ckpt, save_dir, spec, saved_dtype, out_dtype,
                         _hf_config_text(ckpt, spec, out_dtype, recorded, vision),
                         generation if generation.is_file() else None, tokenizer_dir,
                         max_bytes, overwrite, notes, vision, recorded, processor_dir)


def run_mcore_to_hf(plan: McoreToHFPlan, progress: bool = True) -> Path:
    spec, vision, out_dtype = plan.spec, plan.vision, PARAMS_DTYPES[plan.params_dtype]
    entries = [(name, tuple(shape), out_dtype)
               for rule, layer in mapping.iter_rules(spec, vision)
               for name, shape in zip(rule.hf_names(layer),
                                      mapping.expected_hf_shapes(rule, spec))]
    with single_process_megatron():
        # Built only for its sharded-state-dict layout: never initialised, never filled.
        model = _build_model(spec, vision, plan.hf_config, plan.saved_dtype)
        sharded = mcore_io.model_sharded_state_dict(model)
        saved = mcore_io.check_checkpoint_files(plan.ckpt_dir)
        check_saved_tensors(sharded, saved, plan.ckpt_dir)
        with staged_dir(plan.save_dir, plan.overwrite) as tmp:
            (tmp / "config.json").write_text(plan.config_text)
            if plan.generation_config is not None:
                hf_io.copy_files(plan.generation_config.parent, tmp, ["generation_config.json"])
            if plan.tokenizer_dir is not None:
                hf_io.copy_files(plan.tokenizer_dir, tmp, hf_io.TOKENIZER_FILES)
            if plan.processor_dir is not None:
                hf_io.copy_files(plan.processor_dir, tmp, PROCESSOR_FILES)
            writer = hf_io.ShardedSafetensorsWriter(tmp, entries, plan.max_shard_bytes)
            steps = _steps(spec, vision)
            arena = fastio.Arena()
            try:
                with _progress(len(steps), "mcore->hf", progress) as bar, \
                        distcp_reader.DistcpReader(plan.ckpt_dir) as reader:
                    for label, group in steps:
                        bar.set_postfix_str(label)
                        for rule, layer in group:
                            _write_hf_parts(rule, layer, spec, sharded, saved, reader, writer,
                                            arena)
                        bar.update()
                writer.finish()
            except BaseException:
                writer.abort()
                raise
    return plan.save_dir


def _write_hf_parts(rule: mapping.TensorRule, layer: Optional[int], spec: ModelSpec,
                    sharded: Dict, saved: Dict[str, Tuple], reader, writer, arena) -> None:
    """Write the HF tensors of one Megatron tensor: copied from the checkpoint files as they
    are where their bytes lie there in order (copy_plan), else read into one reused buffer
    and written from it (the writer copies what is strided or cast)."""
    name = rule.mcore_name(layer)
    names = rule.hf_names(layer)
    parts = copy_plan.hf_pieces(rule, spec, sharded[name], reader, writer.dtype(names[0]))
    if parts is not None:
        for hf_name, pieces in zip(names, parts):
            writer.write_pieces(hf_name, pieces)
        return
    full = distcp_reader.read_tensors({name: sharded[name]}, reader, saved, arena)[name]
    for hf_name, view in zip(names, mapping.mcore_part_views(rule, full, spec)):
        writer.write(hf_name, view)


def mcore_to_hf(load_dir, save_dir, progress: bool = True, **options) -> Path:
    """Plan (all checks) then convert; see plan_mcore_to_hf for the options."""
    return run_mcore_to_hf(plan_mcore_to_hf(load_dir, save_dir, **options), progress)
