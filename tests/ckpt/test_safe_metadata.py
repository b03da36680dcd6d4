"""A torch_dist checkpoint's pickled .metadata is read with an unpickler that admits only
the classes torch DCP writes: real checkpoints load through it, a crafted file is refused
with the file and the class named, and its payload never runs."""

import os
import pickle
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mindrl.ckpt import converter, distcp_reader, mcore_io
from mindrl.ckpt.safe_metadata import (ALLOWED, SafeFileSystemReader, UnsafeMetadataError,
                                       load_metadata)
from mindrl.distributed import spawn_local


def save_megatron_checkpoint(rank, world_size, out):
    """What a training checkpoint holds, written by Megatron: tensors of three dtypes and a
    pickled object (the RNG state's kind, BytesStorageMetadata in .metadata)."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    g = torch.Generator().manual_seed(0)
    state = {"w": ShardedTensor.from_rank_offsets("w", torch.randn(4, 6, generator=g)),
             "h": ShardedTensor.from_rank_offsets("h", torch.ones(4, dtype=torch.bfloat16)),
             "i": ShardedTensor.from_rank_offsets("i", torch.arange(3)),
             "rng_state": ShardedObject("rng_state", {"rng": torch.get_rng_state()}, (1,), (0,)),
             "iteration": 3}
    dist_checkpointing.save(state, str(out))


class _Recording(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.seen = set()

    def find_class(self, module, name):
        self.seen.add((module, name))
        return super().find_class(module, name)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("dcp")
    with warnings.catch_warnings():  # DCP warns when torch.distributed is not up
        warnings.simplefilter("ignore")
        dcp.save({"a": torch.randn(3, 2), "b": torch.zeros(2, dtype=torch.float16),
                  "obj": {"step": 1}}, checkpoint_id=str(root / "torch_dcp"))
    (root / "megatron").mkdir()
    spawn_local(save_megatron_checkpoint, 1, root / "megatron")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torch_dcp", "megatron"])
def test_real_checkpoint_metadata_loads(checkpoints, kind):
    path = checkpoints / kind / ".metadata"
    with open(path, "rb") as f:
        recording = _Recording(f)
        plain = recording.load()
    assert load_metadata(path) == plain
    outside = {(m, n) for m, n in recording.seen
               if n not in ALLOWED.get(m, ()) and not (m == "torch" and isinstance(
                   getattr(torch, n), torch.dtype))}
    assert not outside
    assert {("torch", "Size"), ("torch.distributed.checkpoint.metadata", "Metadata"),
            ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata")} <= recording.seen


@pytest.mark.slow
def test_torch_load_path_reads_through_the_safe_reader(checkpoints):
    out = {"a": torch.empty(3, 2), "b": torch.empty(2, dtype=torch.float16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(out, storage_reader=SafeFileSystemReader(str(checkpoints / "torch_dcp")))
    assert out["b"].dtype == torch.float16 and out["a"].abs().sum() > 0


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _craft(ckpt_dir, marker):
    """A real .metadata with a payload hidden in planner_data (read before anything else)."""
    real = load_metadata(ckpt_dir / ".metadata")
    real.planner_data = {"x": _Payload(marker)}
    (ckpt_dir / ".metadata").write_bytes(pickle.dumps(real))


def test_crafted_metadata_is_refused_and_never_runs(fake_mcore, tmp_path):
    ckpt = fake_mcore / "release"
    marker = tmp_path / "pwned"
    _craft(ckpt, marker)
    system = f"{os.system.__module__}.system"  # posix.system on Linux
    where = str(ckpt / ".metadata")
    with pytest.raises(UnsafeMetadataError, match=f"refusing to unpickle {system}") as e:
        load_metadata(ckpt / ".metadata")
    assert where in str(e.value)
    for read in (lambda: mcore_io.check_checkpoint_files(ckpt),
                 lambda: distcp_reader.DistcpReader(ckpt)):
        with pytest.raises(mcore_io.McoreCheckpointError, match=system) as e:
            read()
        assert where in str(e.value)
    with pytest.raises(converter.ConversionError, match=system):
        converter.plan_mcore_to_hf(fake_mcore, tmp_path / "hf")
    with pytest.raises(UnsafeMetadataError, match=system):
        SafeFileSystemReader(str(ckpt)).read_metadata()
    assert not marker.exists()
    assert not (tmp_path / "hf").exists()


def resume_error(rank, world_size, ckpt):
    """Resume from ckpt in a process of its own: importing Megatron registers its safe
    globals with torch.load, which would widen weights_only for the tests that follow."""
    from mindrl.ckpt.training import megatron_checkpoint

    try:
        megatron_checkpoint.load(None, None, None, ckpt)
    except UnsafeMetadataError as e:
        return str(e)
    return None


@pytest.mark.slow
def test_training_resume_refuses_a_crafted_metadata(fake_mcore, tmp_path):
    ckpt = fake_mcore / "release"
    marker = tmp_path / "pwned"
    _craft(ckpt, marker)
    [error] = spawn_local(resume_error, 1, ckpt)
    assert error is not None and str(ckpt / ".metadata") in error
    assert f"{os.system.__module__}.system" in error
    assert not marker.exists()


def test_metadata_that_is_not_dcp_metadata(tmp_path):
    path = tmp_path / ".metadata"
    path.write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    with pytest.raises(UnsafeMetadataError, match="not torch DCP Metadata"):
        load_metadata(path)
    path.write_bytes(pickle.dumps(pickle.loads))  # a function of an allowed-looking module
    with pytest.raises(UnsafeMetadataError, match=r"refusing to unpickle _?pickle\.loads"):
        load_metadata(path)
