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

import contextlib
import dataclasses
import io
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch

from mindrl.ckpt import fastio, mapping
from mindrl.models.spec import ModelSpec

TRACKER = "latest_checkpointed_iteration.txt"
RELEASE = "release"
MODEL_INFO = "mindrl_model.json"
HF_ASSETS = "hf"
STATE_KEY = "model"
CHECKPOINT_VERSION = 3.0
FORMAT = "mindrl-mcore-torch_dist"
FORMAT_VERSION = 1
VOCAB_KEYS = (mapping.EMBEDDING.mcore, mapping.OUTPUT.mcore)


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
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    ckpt_dir = Path(ckpt_dir)
    for name in ("metadata.json", "common.pt", ".metadata"):
        if not (ckpt_dir / name).is_file():
            raise McoreCheckpointError(f"{ckpt_dir / name} is missing: incomplete checkpoint")
    try:
        metadata = FileSystemReader(str(ckpt_dir)).read_metadata()
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


def check_model_matches(model, spec: ModelSpec, source: str) -> None:
    """The model about to be loaded has the checkpoint's shape (clear error, not a DCP trace)."""
    cfg = model.config
    pairs = {
        "num_layers": (spec.num_layers, cfg.num_layers),
        "hidden_size": (spec.hidden_size, cfg.hidden_size),
        "ffn_hidden_size": (spec.ffn_hidden_size, cfg.ffn_hidden_size),
        "num_attention_heads": (spec.num_attention_heads, cfg.num_attention_heads),
        "num_query_groups": (spec.num_query_groups, cfg.num_query_groups or
                             cfg.num_attention_heads),
        "head_dim": (spec.head_dim, cfg.kv_channels),
        "add_qkv_bias": (spec.add_qkv_bias, cfg.add_qkv_bias),
        "tied embeddings": (spec.tied_embeddings, model.share_embeddings_and_output_weights),
        "head (lm / scalar)": (spec.head, getattr(model, "head_kind", "lm")),
    }
    wrong = [f"{k}: checkpoint {a}, model {b}" for k, (a, b) in pairs.items() if a != b]
    if model.vocab_size < spec.vocab_size:
        wrong.append(f"vocab rows: checkpoint needs {spec.vocab_size}, model has "
                     f"{model.vocab_size}")
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
                          release_params: bool = False, extra_info: Optional[Dict] = None,
                          checksums: bool = True,
                          fill: Optional[Callable[[str, torch.Tensor], None]] = None) -> Path:
    """Save ``model`` (this rank's stage, any TP/PP; all ranks call) under ``root``.

    hf_assets: an HF model folder whose config and tokenizer files go to the checkpoint's hf/
    folder, or a callable that fills it (rank 0). release_params is accepted for
    compatibility and needs nothing any more: views (e.g. the gate and up halves of
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

    Files are written in this process, one file per rank, in state-dict order, fsynced once
    (Megatron's default writer forks writer processes and reports through a spawned manager
    process: seconds of start-up on a CPU host for nothing a single sequential write needs).
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
    # release_params: nothing to do any more. The writer saves views (the gate and up
    # halves of linear_fc1) from the parameter's own memory instead of copying them first,
    # so a save never holds the model twice.
    model_state = model_sharded_state_dict(model)
    state = {STATE_KEY: model_state, "checkpoint_version": CHECKPOINT_VERSION,
             "iteration": iteration or 0}
    source = _ParamSource(model, fill)
    with _torch_save_crc32(checksums), _streaming_writer(source):
        dist_checkpointing.save(state, str(ckpt), sharded_strategy=_save_strategy())
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


class _ParamSource:
    """Turns a tensor the checkpoint planner resolved into bytes the writer may save.

    torch.save writes a tensor's whole storage, so a view (e.g. the gate or up half of
    linear_fc1) is first copied into a tensor of its own, in a reused arena rather than in
    fresh memory. With ``fill``, a view of a parameter is produced by filling the whole
    parameter into the arena (once for all its views) instead of read from the model.
    """

    def __init__(self, model, fill: Optional[Callable[[str, torch.Tensor], None]]):
        self._fill = fill
        self._params = {p.untyped_storage().data_ptr(): (name, p)
                        for name, p in model.named_parameters()} if fill is not None else {}
        self._arena = fastio.Arena()      # the parameter being written
        self._scratch_arena = fastio.Arena()  # copies of strided views
        self._current = None  # (storage ptr, filled tensor in the arena)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        if tensor.device.type != "cpu":
            return tensor.cpu()
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in self._params:
            name, param = self._params[ptr]
            if self._current is None or self._current[0] != ptr:
                self._current = None
                self._arena.reset()
                self._arena.reserve(fastio.nbytes(param.shape, param.dtype))
                out = self._arena.take(param.shape, param.dtype)
                with torch.no_grad():
                    self._fill(name, out)
                self._current = (ptr, out)
            filled = self._current[1]
            offset = filled.storage_offset() + tensor.storage_offset() - param.storage_offset()
            tensor = torch.as_strided(filled, tensor.shape, tensor.stride(), offset)
        return _own(tensor, self._scratch)

    def _scratch(self, shape, dtype: torch.dtype) -> torch.Tensor:
        self._scratch_arena.reset()
        self._scratch_arena.reserve(fastio.nbytes(shape, dtype))
        return self._scratch_arena.take(shape, dtype)

    def done(self) -> None:
        self._current = None
        self._arena = self._scratch_arena = None


def _own(tensor: torch.Tensor, scratch) -> torch.Tensor:
    """``tensor`` if it is its whole storage, else a copy of it that is."""
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.untyped_storage().nbytes() == nbytes and tensor.storage_offset() == 0 and \
            tensor.is_contiguous():
        return tensor
    if tensor.is_contiguous():  # a contiguous view: wrap its bytes, no copy
        return _wrap_bytes(tensor)
    out = scratch(tensor.shape, tensor.dtype)
    out.copy_(tensor)
    return out


def _wrap_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor sharing a contiguous tensor's memory whose storage is exactly its bytes."""
    if tensor.numel() == 0:
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    flat = tensor.reshape(-1).view(torch.uint8)
    return torch.frombuffer(flat.numpy(), dtype=tensor.dtype).view(tensor.shape)


def _save_strategy():
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    return TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1)


_writer_lock = threading.Lock()


@contextlib.contextmanager
def _streaming_writer(source: "_ParamSource"):
    """Make Megatron's torch_dist save strategy write through ``_StreamingWriter``."""
    from megatron.core.dist_checkpointing.strategies import torch as mcore_torch

    writer_cls = _streaming_writer_class()
    with _writer_lock:
        original = mcore_torch.FileSystemWriterAsync
        mcore_torch.FileSystemWriterAsync = lambda *a, **kw: writer_cls(*a, source=source, **kw)
        try:
            yield
        finally:
            mcore_torch.FileSystemWriterAsync = original
            source.done()


_STREAMING_WRITER = None


def _streaming_writer_class():
    global _STREAMING_WRITER
    if _STREAMING_WRITER is not None:
        return _STREAMING_WRITER
    import functools
    import queue

    from megatron.core.dist_checkpointing.strategies.filesystem_async import (
        FileSystemWriterAsync)
    from torch.distributed.checkpoint.filesystem import (DEFAULT_SUFFIX, SerializationFormat,
                                                         _write_item)
    from torch.distributed.checkpoint.planner import WriteItemType

    class _StreamingWriter(FileSystemWriterAsync):
        """FileSystemWriterAsync that writes in the calling process, one file per rank, items
        in plan (state-dict) order, tensors produced one at a time by a _ParamSource."""

        def __init__(self, *args, source: "_ParamSource", **kwargs):
            super().__init__(*args, **kwargs)
            self._source = source

        def prepare_write_data(self, plan, planner) -> None:
            name = f"{plan.storage_data.prefix}0{DEFAULT_SUFFIX}"
            bytes_data = [(item, planner.resolve_data(item)) for item in plan.items
                          if item.type == WriteItemType.BYTE_IO]
            tensor_data = [(item, planner.resolve_data(item)) for item in plan.items
                           if item.type != WriteItemType.BYTE_IO]
            self.write_buckets = []
            self.results_queue = None
            if bytes_data or tensor_data:
                self.write_buckets = [(os.path.join(self.checkpoint_dir, name), name,
                                       (bytes_data, tensor_data))]
                self.results_queue = queue.Queue()

        def get_save_function_and_args(self):
            if not self.write_buckets:
                return None, None, []
            return (functools.partial(_write_in_process, self.transforms, self._source),
                    None, [torch.distributed.get_rank(), self.write_buckets,
                           self.results_queue])

    def _write_in_process(transforms, source, rank, buckets, results_queue) -> None:
        results = {}
        try:
            for i, (path, key, (bytes_data, tensor_data)) in enumerate(buckets):
                out = []
                with open(path, "wb", buffering=1 << 20) as stream:
                    flusher = fastio.WriteBehind(stream.fileno())
                    for item, data in bytes_data:
                        out.append(_write_item(transforms, stream, data, item, key,
                                               SerializationFormat.TORCH_SAVE))
                    for item, tensor in tensor_data:
                        out.append(_write_item(transforms, stream, source(tensor), item, key,
                                               SerializationFormat.TORCH_SAVE))
                        stream.flush()
                        flusher.written(stream.tell())
                    stream.flush()
                    flusher.finish()
                results[i] = out
        except Exception as e:  # reported by retrieve_write_results, as Megatron does
            results = e
        results_queue.put(results)

    _STREAMING_WRITER = _StreamingWriter
    return _STREAMING_WRITER


@contextlib.contextmanager
def _torch_save_crc32(enabled: bool):
    from torch import serialization

    before = serialization.get_crc32_options()
    serialization.set_crc32_options(enabled)
    try:
        yield
    finally:
        serialization.set_crc32_options(before)


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
    sharded = model_sharded_state_dict(model)
    fixes = fit_vocab_rows(sharded, saved)
    state = dist_checkpointing.load({STATE_KEY: sharded}, str(ckpt))[STATE_KEY]
    _finish_rows(state, fixes)
    missing, unexpected = model.load_state_dict(state, strict=False)
    fixed = {name for name, _, _ in fixes}
    missing = [k for k in missing if k not in fixed]
    if missing or unexpected:
        raise McoreCheckpointError(f"{ckpt}: state mismatch after load: missing {missing}, "
                                   f"unexpected {unexpected}")
    return info


class _FileSlice(io.RawIOBase):
    """A read-only file view of bytes [offset, offset + length) of an open fd (pread)."""

    def __init__(self, fd: int, offset: int, length: int):
        super().__init__()
        self._fd, self._offset, self._length, self._pos = fd, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._length}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf) -> int:
        n = max(0, min(len(buf), self._length - self._pos))
        if n == 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buf)[:n]], self._offset + self._pos)
        self._pos += got
        return got


def _pread(fd: int, offset: int, out: torch.Tensor, where: str) -> None:
    try:
        fastio.pread_into(fd, offset, out, where)
    except EOFError as e:
        raise McoreCheckpointError(str(e)) from None


class DistcpReader:
    """Reads boxes of a torch_dist checkpoint's tensors straight into the caller's buffers.

    The files are what DCP's FileSystemReader reads (its .metadata says where each saved
    chunk's torch.save record lies); a record's small pickle is read for the tensor's exact
    layout (torch.load onto the meta device) and its data is then pread into place, where
    the generic loader unpickles every record into fresh memory, copies it into the target
    and runs collectives even in a world of one. For streaming readers (mcore -> HF).
    """

    def __init__(self, ckpt_dir):
        from torch.distributed.checkpoint import FileSystemReader

        self.directory = Path(ckpt_dir)
        try:
            self.metadata = FileSystemReader(str(self.directory)).read_metadata()
        except Exception as e:
            raise McoreCheckpointError(f"{self.directory / '.metadata'}: unreadable "
                                       f"({e})") from e
        self._fds: Dict[str, int] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "DistcpReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _record(self, key: str, offsets) -> Tuple[int, int, torch.Tensor, str]:
        """(fd, file offset of the data, meta tensor with the saved layout, file name)."""
        from torch.distributed.checkpoint.metadata import MetadataIndex

        info = self.metadata.storage_data[MetadataIndex(key, torch.Size(offsets))]
        where = f"{self.directory / info.relative_path} ({key} at {tuple(offsets)})"
        if getattr(info, "transform_descriptors", None):
            raise McoreCheckpointError(f"{where}: stored with transforms "
                                       f"{info.transform_descriptors}, not supported")
        fd = self._fds.get(info.relative_path)
        if fd is None:
            fd = self._fds[info.relative_path] = os.open(self.directory / info.relative_path,
                                                         os.O_RDONLY)
        try:
            meta = torch.load(io.BufferedReader(_FileSlice(fd, info.offset, info.length)),
                              map_location="meta", weights_only=True)
            start = meta.untyped_storage()._checkpoint_offset
        except Exception as e:
            raise McoreCheckpointError(f"{where}: unreadable record ({e})") from e
        if not isinstance(meta, torch.Tensor) or start is None:
            raise McoreCheckpointError(f"{where}: not a tensor record")
        if start + meta.untyped_storage().nbytes() > info.length:
            raise McoreCheckpointError(f"{where}: record shorter than its tensor")
        return fd, info.offset + start, meta, where

    def read_box(self, key: str, offsets, out: torch.Tensor) -> None:
        """Fill ``out`` with the global tensor ``key``'s box at ``offsets`` of out's shape,
        from however many saved chunks (any TP/PP the checkpoint was saved at) cover it."""
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        md = self.metadata.state_dict_metadata.get(key)
        if not isinstance(md, TensorStorageMetadata):
            raise McoreCheckpointError(f"{self.directory}: tensor {key!r} is not in the "
                                       f"checkpoint")
        offsets = tuple(int(o) for o in offsets)
        shape = tuple(out.shape)
        covered = 0
        for chunk in md.chunks:
            lo = [max(a, b) for a, b in zip(offsets, chunk.offsets)]
            hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, shape, chunk.offsets,
                                                          chunk.sizes)]
            if any(h <= low for low, h in zip(lo, hi)):
                continue
            fd, start, meta, where = self._record(key, chunk.offsets)
            if tuple(meta.shape) != tuple(chunk.sizes):
                raise McoreCheckpointError(f"{where}: record shape {tuple(meta.shape)}, "
                                           f"metadata says {tuple(chunk.sizes)}")
            dst = out[tuple(slice(low - o, h - o) for low, h, o in zip(lo, hi, offsets))]
            plain = (meta.is_contiguous() and meta.storage_offset() == 0 and
                     meta.untyped_storage().nbytes() == meta.numel() * meta.element_size())
            if (plain and meta.dtype == out.dtype and dst.is_contiguous() and
                    tuple(dst.shape) == tuple(chunk.sizes)):
                _pread(fd, start, dst, where)  # the common case: no temporary
            else:
                raw = torch.empty(meta.untyped_storage().nbytes(), dtype=torch.uint8)
                _pread(fd, start, raw, where)
                src = torch.as_strided(raw.view(meta.dtype), meta.shape, meta.stride(),
                                       meta.storage_offset())
                dst.copy_(src[tuple(slice(low - c, h - c)
                                    for low, h, c in zip(lo, hi, chunk.offsets))])
            n = 1
            for low, h in zip(lo, hi):
                n *= h - low
            covered += n
        want = out.numel()
        if covered != want:
            raise McoreCheckpointError(f"{self.directory}: the saved chunks of {key!r} cover "
                                       f"{covered} of the {want} values at {offsets} "
                                       f"(incomplete or overlapping checkpoint)")


def read_tensors(entries: Dict, reader: DistcpReader, saved_shapes: Dict[str, Tuple],
                 arena: Optional["fastio.Arena"] = None) -> Dict[str, torch.Tensor]:
    """Read some of a model's sharded entries into fresh buffers (not the model's memory).

    For streaming readers (mcore -> HF): pass one layer's entries at a time and drop the
    result before the next call; with an ``arena`` the buffers are carved from it (it is
    reset here, so earlier results are overwritten). Vocab-row tensors saved with other
    padding get the rows they share and zeros beyond.
    """
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

    def parts_of(sh):
        if isinstance(sh, ShardedTensorFactory):
            # e.g. linear_fc1, saved as [gate; up] halves: read them straight into their
            # places in one buffer.
            return sh.data.shape, sh.data.dtype, lambda buffer: dataclasses.replace(
                sh, data=buffer).build()
        if isinstance(sh, ShardedTensor):
            return tuple(sh.local_shape), sh.dtype, lambda buffer: [
                dataclasses.replace(sh, data=buffer)]
        raise McoreCheckpointError(f"cannot read {type(sh).__name__} entries")

    plans = {name: parts_of(sh) for name, sh in entries.items()}
    if arena is not None:
        arena.reset()
        arena.reserve(sum(fastio.nbytes(shape, dtype) + 64
                          for shape, dtype, _ in plans.values()))
    out = {}
    for name, (shape, dtype, build) in plans.items():
        buffer = arena.take(shape, dtype) if arena is not None else torch.empty(shape,
                                                                                dtype=dtype)
        for part in build(buffer):
            if getattr(part, "flattened_range", None) is not None:
                raise McoreCheckpointError(f"{part.key}: flattened shards are not supported")
            box = part.data.view((1,) * part.prepend_axis_num + tuple(part.local_shape))
            offsets = tuple(part.global_offset)
            axis = part.prepend_axis_num
            if part.key in VOCAB_KEYS and part.key in saved_shapes:
                saved_rows = saved_shapes[part.key][0][axis]
                rows = max(0, min(box.shape[axis], saved_rows - offsets[axis]))
                box.narrow(axis, rows, box.shape[axis] - rows).zero_()
                box = box.narrow(axis, 0, rows)
            if box.numel():
                reader.read_box(part.key, offsets, box)
        out[name] = buffer
    return out
