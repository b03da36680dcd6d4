"""Megatron-core checkpoints: Megatron-LM's directory layout, dist-checkpoint (torch_dist) files.

Layout (Megatron-LM's, so MindSpeed users recognise it)::

    <root>/latest_checkpointed_iteration.txt   "release" (converter) or an iteration number
    <root>/release/  or  <root>/iter_0000010/  one checkpoint:
        metadata.json, common.pt, .metadata, __*_*.distcp    dist_checkpointing, torch_dist
        mindrl_model.json       ModelSpec fields + params dtype: the shape, without guessing
        hf/                     config.json, generation_config.json, tokenizer (optional):
                                what mcore -> HF needs to give back an identical HF directory

State dict: Megatron-LM's ``{"model": model.sharded_state_dict(), "checkpoint_version": 3.0,
"iteration": N}``. Tensor keys carry no prefix and are Megatron's own
(``embedding.word_embeddings.weight``, ``decoder.layers.self_attention.linear_qkv.weight``
with the layers stacked on a leading axis of size num_layers, ``mlp.linear_fc1.weight`` stored
as global [gate; up]). These keys are global-tensor keys, not per-rank files, which is why one
save loads at any TP/PP: each rank reads the slices it holds.

One thing is not TP-independent in Megatron: embedding/output rows are padded to a multiple of
make_vocab_size_divisible_by x TP. ``load_mcore_checkpoint`` bridges that: each rank reads the
rows it has in common with the saved tensor and zeroes the rest (padding rows never score).

The tracker file is written last, so it only ever names a complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch

from mindrl.ckpt import distcp_writer, mapping
from mindrl.config.model_spec import ModelSpec
from mindrl.models.lora import is_adapter_name

TRACKER = "latest_checkpointed_iteration.txt"
RELEASE = "release"
MODEL_INFO = "mindrl_model.json"
HF_ASSETS = "hf"
STATE_KEY = "model"
CHECKPOINT_VERSION = 3.0
FORMAT = "mindrl-mcore-torch_dist"
FORMAT_VERSION = 1
VOCAB_KEYS = (mapping.EMBEDDING.mcore, mapping.OUTPUT.mcore)
# mindrl_model.json's entry for a VL model: the ModelSpec is its language model's.
VISION_INFO = "vision"


def vision_info(family: str, hf_config: dict) -> Dict:
    """extra_info for a VL model's checkpoint: its vision family and its HF config.json (what
    mcore -> HF needs to rebuild the model and write config.json back)."""
    return {VISION_INFO: {"family": family, "hf_config": hf_config}}


class McoreCheckpointError(ValueError):
    """A Megatron checkpoint directory that is missing, partial or of another shape."""


@dataclass
class ModelInfo:
    """mindrl_model.json: everything needed to rebuild the model a checkpoint holds."""

    spec: ModelSpec
    params_dtype: str
    extra: Dict = field(default_factory=dict)

    def to_json(self) -> str:
        body = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "params_dtype": self.params_dtype, "spec": self.spec.to_dict(), **self.extra}
        return json.dumps(body, indent=2, sort_keys=True) + "\n"


def checkpoint_name(iteration: Optional[int]) -> str:
    return RELEASE if iteration is None else f"iter_{iteration:07d}"


def resolve_checkpoint_dir(path) -> Path:
    """A checkpoint root (via its tracker file) or one checkpoint directory -> the latter."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise McoreCheckpointError(f"--load-dir {path} is not a directory")
    tracker = path / TRACKER
    if tracker.is_file():
        text = tracker.read_text().strip()
        if text == RELEASE:
            ckpt = path / RELEASE
        else:
            try:
                ckpt = path / checkpoint_name(int(text))
            except ValueError:
                raise McoreCheckpointError(f"{tracker}: expected 'release' or an iteration "
                                           f"number, found {text!r}") from None
        if not ckpt.is_dir():
            raise McoreCheckpointError(f"{tracker} names {ckpt.name}, which does not exist")
        return ckpt
    if (path / "metadata.json").is_file():
        return path
    raise McoreCheckpointError(f"{path}: not a Megatron checkpoint (no {TRACKER} and no "
                               f"dist-checkpoint metadata.json)")


def read_model_info(ckpt_dir: Path) -> ModelInfo:
    path = Path(ckpt_dir) / MODEL_INFO
    if not path.is_file():
        raise McoreCheckpointError(f"{path} is missing: the checkpoint does not say which "
                                   f"model it holds (was it written by MindRL?)")
    try:
        body = json.loads(path.read_text())
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {FORMAT!r}")
        spec = ModelSpec.from_dict(body.pop("spec"), source=str(path))
        dtype = body.pop("params_dtype")
    except (ValueError, KeyError, TypeError) as e:
        raise McoreCheckpointError(f"{path}: unreadable ({e})") from e
    for key in ("format", "format_version"):
        body.pop(key, None)
    return ModelInfo(spec, dtype, body)


def check_checkpoint_files(ckpt_dir: Path) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
    """Every file the dist checkpoint refers to exists and is long enough; return
    {tensor key: (global shape, dtype)}. Catches partial copies before anything is written."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from mindrl.ckpt.safe_metadata import UnsafeMetadataError, load_metadata

    ckpt_dir = Path(ckpt_dir)
    for name in ("metadata.json", "common.pt", ".metadata"):
        if not (ckpt_dir / name).is_file():
            raise McoreCheckpointError(f"{ckpt_dir / name} is missing: incomplete checkpoint")
    try:  # restricted: dist_checkpointing.load unpickles it again only after this check
        metadata = load_metadata(ckpt_dir / ".metadata")
    except UnsafeMetadataError as e:
        raise McoreCheckpointError(str(e)) from None
    except Exception as e:
        raise McoreCheckpointError(f"{ckpt_dir / '.metadata'}: unreadable ({e})") from e
    needed: Dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0),
                                         info.offset + info.length)
    for rel, length in sorted(needed.items()):
        path = ckpt_dir / rel
        if not path.is_file():
            raise McoreCheckpointError(f"{path} is missing: incomplete checkpoint")
        if path.stat().st_size < length:
            raise McoreCheckpointError(f"{path} is truncated ({path.stat().st_size} bytes, "
                                       f"needs {length})")
    return {key: (tuple(md.size), md.properties.dtype)
            for key, md in metadata.state_dict_metadata.items()
            if isinstance(md, TensorStorageMetadata)}


def model_sharded_state_dict(model) -> Dict:
    """The one place that decides how a model's state maps onto checkpoint keys."""
    return model.sharded_state_dict()


def _shape(spec: ModelSpec) -> Dict[str, object]:
    """What a checkpoint's tensors depend on, by the names the refusals use."""
    return {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
            "ffn_hidden_size": spec.ffn_hidden_size,
            "num_attention_heads": spec.num_attention_heads,
            "num_query_groups": spec.num_query_groups, "head_dim": spec.head_dim,
            "add_qkv_bias": spec.add_qkv_bias, "tied embeddings": spec.tied_embeddings,
            "head (lm / scalar)": spec.head}


def _differences(saved: Dict[str, object], built: Dict[str, object], saved_vocab: int,
                 built_vocab: int) -> List[str]:
    wrong = [f"{k}: checkpoint {saved[k]}, model {built[k]}" for k in saved
             if saved[k] != built[k]]
    if built_vocab < saved_vocab:
        wrong.append(f"vocab rows: checkpoint needs {saved_vocab}, model has {built_vocab}")
    return wrong


def spec_differences(saved: ModelSpec, wanted: ModelSpec, tensor_parallel_size: int
                     ) -> List[str]:
    """How the model a checkpoint records differs from the one a recipe builds at this TP
    (read before any worker starts); [] when it loads."""
    return _differences(_shape(saved), _shape(wanted), saved.vocab_size,
                        wanted.padded_vocab_size(tensor_parallel_size))


def check_model_matches(model, spec: ModelSpec, source: str) -> None:
    """The model about to be loaded has the checkpoint's shape (clear error, not a DCP trace)."""
    cfg = model.config
    built = {"num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
             "ffn_hidden_size": cfg.ffn_hidden_size,
             "num_attention_heads": cfg.num_attention_heads,
             "num_query_groups": cfg.num_query_groups or cfg.num_attention_heads,
             "head_dim": cfg.kv_channels, "add_qkv_bias": cfg.add_qkv_bias,
             "tied embeddings": model.share_embeddings_and_output_weights,
             "head (lm / scalar)": getattr(model, "head_kind", "lm")}
    wrong = _differences(_shape(spec), built, spec.vocab_size, model.vocab_size)
    if wrong:
        raise McoreCheckpointError(f"{source} holds a different model: " + "; ".join(wrong))


# ------------------------------------------------------------------ vocab rows

RowFix = Tuple[str, torch.Tensor, int]  # (state-dict name, local tensor, rows read)


def fit_vocab_rows(sharded: Dict, saved_shapes: Dict[str, Tuple]) -> List[RowFix]:
    """Point each vocab-row ShardedTensor at the rows it shares with the saved tensor.

    Rewrites entries in place (dropping those with nothing in common) and returns what the
    caller must finish after loading: zero the local rows beyond those read.
    """
    from megatron.core.dist_checkpointing import ShardedTensor

    fixes: List[RowFix] = []
    for name in list(sharded):
        sh = sharded[name]
        if not isinstance(sh, ShardedTensor) or sh.key not in VOCAB_KEYS:
            continue
        if sh.key not in saved_shapes:
            continue  # reported as a missing tensor by the loader
        saved_rows = saved_shapes[sh.key][0][0]
        if sh.global_shape[0] == saved_rows:
            continue
        start, rows = sh.global_offset[0], sh.local_shape[0]
        n = max(0, min(rows, saved_rows - start))
        fixes.append((name, sh.data, n))
        if n == 0:
            del sharded[name]
            continue
        sharded[name] = dataclasses.replace(
            sh, data=sh.data[:n], local_shape=(n, *sh.local_shape[1:]),
            global_shape=(saved_rows, *sh.global_shape[1:]), axis_fragmentations=None)
    return fixes


def _finish_rows(state: Dict, fixes: List[RowFix]) -> None:
    with torch.no_grad():
        for name, local, n in fixes:
            if n:
                local[:n].copy_(state.pop(name))
            local[n:].zero_()


# ------------------------------------------------------------------ save / load

def save_mcore_checkpoint(model, root, spec: ModelSpec, params_dtype: str,
                          iteration: Optional[int] = None,
                          hf_assets: Union[None, str, Path, Callable[[Path], None]] = None,
                          extra_info: Optional[Dict] = None,
                          checksums: bool = True,
                          fill: Optional[Callable[[str, torch.Tensor], None]] = None,
                          pieces: Optional[distcp_writer.Pieces] = None) -> Path:
    """Save ``model`` (this rank's stage, any TP/PP; all ranks call) under ``root``.

    hf_assets: an HF model folder whose config and tokenizer files go to the checkpoint's hf/
    folder, or a callable that fills it (rank 0). Views (e.g. the gate and up halves of
    linear_fc1) are written from the parameter's own memory, never copied all at once, so a
    save never holds the model twice.
    checksums=False skips torch.save's per-record CRC32, which costs more than the write
    itself on CPU (about 1 GiB/s); a converter passes it because its safetensors input
    carries no checksum either. torch.load reads such files as usual.
    fill: produce parameters on demand instead of reading them from the model: called as
    ``fill(parameter name, out)`` with a contiguous buffer shaped like the parameter, just
    before its bytes are written, so the model's own parameters are never touched (a
    converter builds the model for its checkpoint layout only; the model then holds no
    weights and one parameter at a time is in memory). Every parameter must be fillable.
    pieces: with fill and checksums=False, ``pieces(parameter name, parameter)`` may say
    where a parameter's bytes already lie in files (fastio pieces, in row-major order); they
    are then copied from file to file, never read into memory. None falls back to fill.

    Files are written in this process, one file per rank, in state-dict order, durable when
    done (Megatron's default writer forks writer processes and reports through a spawned
    manager process: seconds of start-up on a CPU host for nothing a sequential write needs).
    The format is the same torch_dist checkpoint (DCP metadata + torch.save records).
    """
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    root = Path(root)
    ckpt = root / checkpoint_name(iteration)
    rank = dist.get_rank()
    if rank == 0:
        ckpt.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    model_state = model_sharded_state_dict(model)
    state = {STATE_KEY: model_state, "checkpoint_version": CHECKPOINT_VERSION,
             "iteration": iteration or 0}
    source = distcp_writer.ParamSource(model, fill, pieces)
    with distcp_writer.torch_save_crc32(checksums), distcp_writer.streaming_writer(source):
        dist_checkpointing.save(state, str(ckpt), sharded_strategy=distcp_writer.save_strategy())
    if rank == 0:
        info = ModelInfo(spec, params_dtype, dict(extra_info or {}))
        (ckpt / MODEL_INFO).write_text(info.to_json())
        if hf_assets is not None:
            (ckpt / HF_ASSETS).mkdir(exist_ok=True)
            if callable(hf_assets):
                hf_assets(ckpt / HF_ASSETS)
            else:
                from mindrl.ckpt.hf_io import CONFIG_FILES, TOKENIZER_FILES, copy_files

                copy_files(Path(hf_assets), ckpt / HF_ASSETS, CONFIG_FILES + TOKENIZER_FILES)
        tmp = root / f".{TRACKER}.tmp"
        tmp.write_text(RELEASE if iteration is None else str(iteration))
        os.replace(tmp, root / TRACKER)
    dist.barrier()
    return ckpt


def load_mcore_checkpoint(model, ckpt_dir, check_spec: bool = True) -> ModelInfo:
    """Load a checkpoint into ``model`` at whatever TP/PP it was built with (all ranks call).

    ckpt_dir is a checkpoint root (its tracker names the checkpoint) or one checkpoint dir.
    """
    from megatron.core import dist_checkpointing

    ckpt = resolve_checkpoint_dir(ckpt_dir)
    info = read_model_info(ckpt)
    if check_spec:
        check_model_matches(model, info.spec, str(ckpt))
    saved = check_checkpoint_files(ckpt)
    # A base checkpoint holds no adapters: a LoRA model's start from the converter's output
    # (its adapters keep their fresh values: B = 0, the base model exactly).
    sharded = {k: v for k, v in model_sharded_state_dict(model).items()
               if not is_adapter_name(k)}
    fixes = fit_vocab_rows(sharded, saved)
    state = dist_checkpointing.load({STATE_KEY: sharded}, str(ckpt))[STATE_KEY]
    _finish_rows(state, fixes)
    missing, unexpected = model.load_state_dict(state, strict=False)
    fixed = {name for name, _, _ in fixes}
    missing = [k for k in missing if k not in fixed and not is_adapter_name(k)]
    if missing or unexpected:
        raise McoreCheckpointError(f"{ckpt}: state mismatch after load: missing {missing}, "
                                   f"unexpected {unexpected}")
    return info
