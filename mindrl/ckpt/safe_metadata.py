"""Read a torch_dist checkpoint's ``.metadata`` without running code from it.

torch DCP writes ``.metadata`` with pickle and its FileSystemReader reads it back with a plain
``pickle.load``, which executes whatever the file names: a checkpoint downloaded or copied
from elsewhere could run code on the machine that loads it. The file only ever holds DCP's
own records (metadata, save-plan and storage dataclasses, their enums), ``torch.Size``, dtypes,
layouts, paths and builtin containers, so an unpickler that admits exactly those classes reads every
real checkpoint and refuses anything else, naming the file and the class, before any of it
runs.

``load_metadata(path)`` reads one file; ``SafeFileSystemReader`` is torch's FileSystemReader
with this read_metadata, for code that hands a reader to DCP.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

METADATA_FILE = ".metadata"

# Every class torch DCP (and Megatron's torch_dist saver, which keeps its save plans in
# planner_data) puts in .metadata, found by reading torch/distributed/checkpoint/{metadata,
# planner,filesystem}.py and by recording the classes real checkpoints name (the tests do).
# Dataclasses, enums and value types: building them sets fields or looks a value up by name;
# nothing the file names can run commands, import modules or touch files.
ALLOWED = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "StorageMeta", "MetadataIndex", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.planner": {
        "SavePlan", "WriteItem", "WriteItemType", "TensorWriteData", "BytesIOWriteData"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    "torch": {"Size"},                        # and every torch dtype (below)
    "torch.serialization": {"_get_layout"},   # torch.layout's pickle: a lookup by name
    "builtins": {"set", "frozenset"},         # older pickle protocols build these by call
    "collections": {"OrderedDict"},
    # StorageMeta.checkpoint_id: the path the saver was given (dcp.save(checkpoint_id=Path))
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
}


class UnsafeMetadataError(pickle.UnpicklingError):
    """A .metadata file names a class a torch DCP checkpoint never holds."""


def _allowed(module: str, name: str) -> bool:
    if name in ALLOWED.get(module, ()):
        return True
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, path: Path):
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if not _allowed(module, name):
            raise UnsafeMetadataError(
                f"{self._path}: refusing to unpickle {module}.{name}: a torch_dist .metadata "
                f"holds only torch.distributed.checkpoint records, so this file was not "
                f"written by torch DCP / Megatron or was altered. Nothing from it was run; "
                f"use a checkpoint from a source you trust (or re-save it there)")
        return super().find_class(module, name)


def load_metadata(path) -> Metadata:
    """Unpickle one .metadata file admitting only the classes DCP writes (see ALLOWED).

    Raises UnsafeMetadataError naming the file and the class for anything else, and for a
    file whose content is not DCP Metadata at all."""
    path = Path(path)
    with open(path, "rb") as f:
        metadata = _RestrictedUnpickler(f, path).load()
    if not isinstance(metadata, Metadata):
        raise UnsafeMetadataError(f"{path}: holds a {type(metadata).__name__}, not torch DCP "
                                  f"Metadata: not a torch_dist checkpoint's .metadata")
    return metadata


def check_checkpoint_metadata(ckpt_dir) -> None:
    """Vet ``ckpt_dir/.metadata`` before a reader we do not control unpickles it unrestricted
    (Megatron's dist_checkpointing.load): a crafted file is refused before it is loaded."""
    load_metadata(Path(ckpt_dir) / METADATA_FILE)


class SafeFileSystemReader(FileSystemReader):
    """torch's FileSystemReader whose read_metadata uses the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
        metadata = load_metadata(Path(self.path) / name)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # as torch's own read_metadata does
        return metadata
