"""HF checkpoint files: read weights tensor by tensor, write sharded safetensors as a stream.

Reading: names, shapes and dtypes come from the safetensors headers alone, so a checkpoint
is validated (missing or truncated shards, index/file disagreement) before any tensor is
read; tensors are then read one at a time. ``pytorch_model*.bin`` files are accepted but
only loaded with ``weights_only=True`` (and memory-mapped). A stored tensor that stacks several
tensors (a MoE layer's experts, as a loaded transformers model holds them) may be read as its
parts (``split``): each part is a contiguous range of the stored tensor, read by itself.

Writing: safetensors needs every tensor's shape and offset in the header, which a converter
knows from the model spec before it has any tensor. ``ShardedSafetensorsWriter`` therefore
plans the shards up front, writes each header first and then appends tensors as they are
produced, so the output is streamed with one tensor in memory, not one shard. A tensor that
is a plain copy of input bytes is given as file pieces and never held in memory at all. Each
shard goes out through a ``fastio.DirectWriter`` (durable when complete).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from mindrl.ckpt import fastio

SAFE_INDEX = "model.safetensors.index.json"
SAFE_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

# Small files that travel with the weights: config and tokenizer.
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")

SAFETENSORS_DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
DTYPE_TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_DTYPES.items()}


class HFCheckpointError(ValueError):
    """An HF checkpoint directory that cannot be read as it claims to be."""


Shape = Tuple[int, ...]
# stored name, shape -> its parts (name, shape, first element) or None (mapping/stacked.py)
Split = Callable[[str, Shape], Optional[Sequence[Tuple[str, Shape, int]]]]


class HFWeights:
    """The weights of one HF checkpoint directory: headers up front, tensors on demand."""

    def __init__(self, directory: Path, files: Dict[str, Path],
                 info: Dict[str, Tuple[Shape, torch.dtype]], handles: Dict[Path, object],
                 stored: Optional[Dict[str, str]] = None,
                 starts: Optional[Dict[str, int]] = None):
        self.directory = directory
        self._files = files
        self._info = info
        self._handles = handles
        self._stored = stored or {}   # name -> name in its file, where they differ
        self._starts = starts or {}   # a part of a stacked tensor -> its first element there

    # -------------------------------------------------------------- opening

    @classmethod
    def open(cls, directory, rename: Optional[Callable[[str], str]] = None,
             split: Optional[Split] = None) -> "HFWeights":
        """rename: the name each stored tensor is known by (mapping.hf_disk_name reads a
        loaded model's names as the on-disk ones); split: the parts a stored (renamed) tensor
        is read as, if any (mapping/stacked.py); the files are not changed."""
        directory = Path(directory).expanduser().resolve()
        if not directory.is_dir():
            raise HFCheckpointError(f"--load-dir {directory} is not a directory")
        for index_name, single, opener in ((SAFE_INDEX, SAFE_SINGLE, _open_safetensors),
                                           (BIN_INDEX, BIN_SINGLE, _open_torch_file)):
            index = directory / index_name
            if index.is_file():
                shard_of = _read_index(index)
                return cls._from_files(directory, shard_of, opener, index, rename, split)
            if (directory / single).is_file():
                return cls._from_files(directory, None, opener, directory / single, rename,
                                       split)
        found = sorted(p.name for p in directory.iterdir()
                       if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
        hint = f" (found {', '.join(found)} but no index naming them)" if found else ""
        raise HFCheckpointError(
            f"{directory}: no HF weights: expected {SAFE_SINGLE} or {SAFE_INDEX} "
            f"(or {BIN_SINGLE} / {BIN_INDEX}){hint}")

    @classmethod
    def _from_files(cls, directory: Path, shard_of: Optional[Dict[str, str]], opener,
                    source: Path, rename: Optional[Callable[[str], str]] = None,
                    split: Optional[Split] = None) -> "HFWeights":
        if shard_of is None:
            file_names = [source.name]
        else:
            file_names = sorted(set(shard_of.values()))
            missing = [f for f in file_names if not (directory / f).is_file()]
            if missing:
                raise HFCheckpointError(
                    f"{directory}: missing shard file(s) {', '.join(missing)} listed in "
                    f"{source.name}")
        files: Dict[str, Path] = {}
        info: Dict[str, Tuple[Shape, torch.dtype]] = {}
        handles: Dict[Path, object] = {}
        stored: Dict[str, str] = {}
        starts: Dict[str, int] = {}
        located: Dict[str, Path] = {}   # stored tensors (renamed) -> their file
        rename = rename or (lambda n: n)
        for name in file_names:
            path = directory / name
            handle, header = opener(path)
            handles[path] = handle
            for original, (shape, dtype) in header.items():
                located[rename(original)] = path
                for tensor, part_shape, start in _parts(rename(original), shape, split, path):
                    if tensor in files:
                        raise HFCheckpointError(f"tensor {tensor!r} is stored twice: in "
                                                f"{files[tensor].name} and {name}")
                    files[tensor] = path
                    info[tensor] = (part_shape, dtype)
                    if tensor != original:
                        stored[tensor] = original
                    if start is not None:
                        starts[tensor] = start
        if shard_of is not None:
            for original, name in shard_of.items():
                tensor = rename(original)
                if located.get(tensor) != directory / name:
                    where = f"it is in {located[tensor].name}" if tensor in located else \
                        "no shard holds it"
                    raise HFCheckpointError(
                        f"{directory / name}: tensor {original!r} is listed there by "
                        f"{source.name} but {where} (partial or mismatched shards?)")
        return cls(directory, files, info, handles, stored, starts)

    # -------------------------------------------------------------- queries

    def names(self) -> List[str]:
        return list(self._info)

    def __contains__(self, name: str) -> bool:
        return name in self._info

    def shape(self, name: str) -> Shape:
        return self._info[name][0]

    def dtype(self, name: str) -> torch.dtype:
        return self._info[name][1]

    def file_of(self, name: str) -> Path:
        return self._files[name]

    def get(self, name: str) -> torch.Tensor:
        """One tensor, read now into fresh memory (the only call that touches tensor data)."""
        path = self._files[name]
        handle = self._handles[path]
        shape, dtype = self._info[name]
        if isinstance(handle, dict):  # a memory-mapped torch file
            tensor = handle[self._stored.get(name, name)]
            if name not in self._starts:
                return tensor
            start = self._starts[name]
            return tensor.reshape(-1)[start:start + math.prod(shape)].view(shape)
        out = torch.empty(shape, dtype=dtype)
        handle.read_into(self.file_bytes(name), out)
        return out

    def file_bytes(self, name: str) -> Optional[fastio.FileBytes]:
        """Where the tensor's bytes lie in its file, for copying them as they are; None for a
        torch pickle (its bytes are only reachable through torch.load)."""
        handle = self._handles[self._files[name]]
        if not isinstance(handle, _SafetensorsFile):
            return None
        where = handle.file_bytes(self._stored.get(name, name))
        if name not in self._starts:
            return where
        shape, dtype = self._info[name]
        return where.part(self._starts[name] * _itemsize(dtype), tensor_nbytes(shape, dtype))

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill ``out`` with one tensor. A contiguous ``out`` of the stored dtype and shape is
        read into directly (no temporary); anything else goes through one and is cast."""
        path = self._files[name]
        handle = self._handles[path]
        shape, dtype = self._info[name]
        if (isinstance(handle, _SafetensorsFile) and out.is_contiguous() and
                out.dtype == dtype and tuple(out.shape) == shape):
            handle.read_into(self.file_bytes(name), out)
        else:
            out.copy_(self.get(name).reshape(out.shape))

    def close(self) -> None:
        for handle in self._handles.values():
            if hasattr(handle, "close"):
                handle.close()
        self._handles.clear()

    def __enter__(self) -> "HFWeights":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parts(tensor: str, shape: Shape, split: Optional[Split], path: Path
           ) -> Sequence[Tuple[str, Shape, Optional[int]]]:
    """A stored tensor as the tensors it is read as: itself, or its parts."""
    try:
        parts = split(tensor, shape) if split is not None else None
    except ValueError as e:
        raise HFCheckpointError(f"{path}: {e}") from None
    return [(tensor, shape, None)] if parts is None else parts


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _read_index(index: Path) -> Dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise HFCheckpointError(f"{index}: not a valid weight index ({e})") from e
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFCheckpointError(f"{index}: empty or malformed weight_map")
    return weight_map


class _SafetensorsFile:
    """Reads tensors with pread into fresh tensors.

    safetensors' own reader (safe_open) validates the file and gives names, shapes and
    dtypes; data is then read with plain preads at the header's offsets rather than through
    safe_open's memory map, whose pages would stay resident and count as a second copy of
    the model for as long as the file is open.
    """

    def __init__(self, path: Path):
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self._base = 8 + n
        self._offsets = {k: tuple(v["data_offsets"]) for k, v in header.items()}

    def file_bytes(self, name: str) -> fastio.FileBytes:
        begin, end = self._offsets[name]
        return fastio.FileBytes(self._fd, self._base + begin, end - begin,
                                f"{self.path}: tensor {name!r}")

    def read_into(self, where: fastio.FileBytes, out: torch.Tensor) -> None:
        """pread a tensor's bytes (`file_bytes`, or a part of them) into a contiguous tensor
        of its dtype and size."""
        if where.nbytes != out.numel() * out.element_size():
            raise HFCheckpointError(f"{where.what} holds {where.nbytes} bytes, expected "
                                    f"{out.numel() * out.element_size()}")
        try:
            fastio.pread_into(where.fd, where.offset, out, where.what)
        except EOFError as e:
            raise HFCheckpointError(str(e)) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open_safetensors(path: Path):
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            header = {}
            for name in handle.keys():
                piece = handle.get_slice(name)
                dtype = piece.get_dtype()
                if dtype not in SAFETENSORS_DTYPES:
                    raise HFCheckpointError(f"{path}: tensor {name!r} has unsupported dtype "
                                            f"{dtype}")
                header[name] = (tuple(piece.get_shape()), SAFETENSORS_DTYPES[dtype])
        reader = _SafetensorsFile(path)
    except HFCheckpointError:
        raise
    except Exception as e:
        raise HFCheckpointError(f"{path}: not a readable safetensors file (truncated or "
                                f"partially written?): {e}") from e
    if set(reader._offsets) != set(header):
        raise HFCheckpointError(f"{path}: header disagrees with safetensors' reading of it")
    return reader, header


def _open_torch_file(path: Path):
    """Torch pickles only with weights_only=True; memory-mapped so nothing is read yet."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:
        lines = str(e).splitlines()
        reason = next((ln for ln in lines if "Unsupported global" in ln), lines[0] if lines else "")
        raise HFCheckpointError(f"{path}: cannot load with torch.load(weights_only=True): "
                                f"{reason.strip()}") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        raise HFCheckpointError(f"{path}: expected a dict of tensors")
    return state, {k: (tuple(v.shape), v.dtype) for k, v in state.items()}


# ------------------------------------------------------------------ streaming writer

def _shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def plan_shards(entries: Sequence[Tuple[str, Shape, torch.dtype]],
                max_shard_bytes: int) -> List[List[Tuple[str, Shape, torch.dtype]]]:
    """Greedy split in write order; a tensor larger than the limit gets a shard of its own."""
    shards: List[list] = [[]]
    size = 0
    for entry in entries:
        nbytes = tensor_nbytes(entry[1], entry[2])
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    return shards


def tensor_nbytes(shape: Shape, dtype: torch.dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()


def _header_bytes(entries: Sequence[Tuple[str, Shape, torch.dtype]]) -> bytes:
    header: Dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, dtype in entries:
        end = offset + tensor_nbytes(shape, dtype)
        header[name] = {"dtype": DTYPE_TO_SAFETENSORS[dtype], "shape": list(shape),
                        "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # tensor data starts 8-byte aligned
    return len(raw).to_bytes(8, "little") + raw


class ShardedSafetensorsWriter:
    """Write planned tensors, in plan order, into model-XXXXX-of-YYYYY.safetensors + index."""

    def __init__(self, out_dir: Path, entries: Sequence[Tuple[str, Shape, torch.dtype]],
                 max_shard_bytes: int):
        self.out_dir = Path(out_dir)
        self.shards = plan_shards(list(entries), max_shard_bytes)
        self._order = [(i, e) for i, shard in enumerate(self.shards) for e in shard]
        self._dtypes = {name: dtype for _, (name, _, dtype) in self._order}
        self._next = 0
        self._file: Optional[fastio.DirectWriter] = None  # the shard being written
        self._shard = -1
        self._scratch = fastio.Arena()  # strided or cast tensors are copied here

    def dtype(self, name: str) -> torch.dtype:
        """The planned dtype of a tensor."""
        return self._dtypes[name]

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Append the next planned tensor. ``tensor`` may be any tensor whose row-major
        order is the planned one's (e.g. a grouped q/k/v view of a fused weight) and any
        floating dtype (cast to the planned one): such a tensor is copied into a reused
        buffer first; a contiguous tensor of the planned dtype is written from its memory."""
        shape, dtype = self._planned(name)
        same = tuple(tensor.shape) == shape or tensor.numel() == math.prod(shape)
        castable = tensor.dtype == dtype or (tensor.dtype.is_floating_point and
                                             dtype.is_floating_point)
        if not same or not castable:
            raise RuntimeError(f"writer expected {name} {shape} {dtype}, got "
                               f"{tuple(tensor.shape)} {tensor.dtype}")
        tensor = tensor.detach()
        if tensor.numel():
            if not (tensor.is_contiguous() and tensor.dtype == dtype):
                self._scratch.reset()
                self._scratch.reserve(fastio.nbytes(tensor.shape, dtype))
                tensor = self._scratch.take(tensor.shape, dtype).copy_(tensor)
            self._file.write(tensor.reshape(-1).view(torch.uint8).numpy())
        self._next += 1

    def write_pieces(self, name: str, pieces: Sequence[fastio.Piece]) -> None:
        """Append the next planned tensor as file pieces holding its bytes in the planned
        dtype and row-major order: copied from file to file, never held in memory."""
        shape, dtype = self._planned(name)
        want = tensor_nbytes(shape, dtype)
        if fastio.pieces_nbytes(pieces) != want:
            raise RuntimeError(f"writer expected {want} bytes for {name}, got "
                               f"{fastio.pieces_nbytes(pieces)}")
        self._file.write_pieces(pieces)
        self._next += 1

    def _planned(self, name: str) -> Tuple[Shape, torch.dtype]:
        """The next planned tensor's shape and dtype, its shard open for writing."""
        if self._next >= len(self._order):
            raise RuntimeError(f"unplanned tensor {name!r}: every planned tensor is written")
        shard, (want, shape, dtype) = self._order[self._next]
        if name != want:
            raise RuntimeError(f"writer expected {want} {shape} {dtype}, got {name}")
        if shard != self._shard:
            self._close_file()
            self._shard = shard
            self._file = fastio.DirectWriter(self.out_dir /
                                             _shard_name(shard, len(self.shards)))
            self._file.write(_header_bytes(self.shards[shard]))
        return shape, dtype

    def _close_file(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.finish()  # fsync

    def finish(self) -> List[Path]:
        """Close the last shard and write the index; every planned tensor must be written."""
        if self._next != len(self._order):
            missing = self._order[self._next][1][0]
            raise RuntimeError(f"conversion ended before tensor {missing!r} was written")
        self._close_file()
        n = len(self.shards)
        weight_map = {name: _shard_name(i, n) for i, shard in enumerate(self.shards)
                      for name, _, _ in shard}
        total = sum(tensor_nbytes(s, d) for _, (_, s, d) in self._order)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (self.out_dir / SAFE_INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return [self.out_dir / _shard_name(i, n) for i in range(n)] + [self.out_dir / SAFE_INDEX]

    def abort(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.abort()
        self._scratch = fastio.Arena()


# ------------------------------------------------------------------ small files

def copy_files(src_dir: Path, dst_dir: Path, names: Iterable[str]) -> List[str]:
    """Copy those of ``names`` that exist in src_dir, byte for byte; return the copied names."""
    copied = []
    for name in names:
        src = Path(src_dir) / name
        if src.is_file():
            shutil.copyfile(src, Path(dst_dir) / name)
            copied.append(name)
    return copied


def parse_size(text: str) -> int:
    """'5GB', '500MB', '2GiB' or a byte count -> bytes."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10,
             "MIB": 2**20, "GIB": 2**30}
    s = str(text).strip().upper()
    digits = s.rstrip("KMGIB")
    unit = s[len(digits):]
    try:
        value = float(digits) * units[unit]
    except (ValueError, KeyError):
        raise ValueError(f"size {text!r}: use e.g. 5GB, 500MB, 2GiB or a byte count") from None
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return int(value)
