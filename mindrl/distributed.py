"""Local multi-process launch (one rank per process, this device's backend).

Used by tests, benchmarks and single-node tools; Ray workers use mindrl.device directly.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Sequence

import torch


def _rank_entry(rank: int, fn: Callable, world_size: int, port: int, args: Sequence[Any],
                result_dir: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    from mindrl import device

    device.init_distributed(rank, world_size, master_port=port)
    try:
        result = fn(rank, world_size, *args)
        with open(Path(result_dir) / f"rank{rank}.pkl", "wb") as f:
            pickle.dump(result, f)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_local(fn: Callable, world_size: int, *args: Any) -> List[Any]:
    """Run fn(rank, world_size, *args) in world_size spawned processes; return their results.

    fn must be importable by name (module-level); results travel through pickle files.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="mindrl-spawn-") as result_dir:
        from mindrl import device

        store = device.listening_store()   # held by this process until the ranks are done
        mp.start_processes(_rank_entry, args=(fn, world_size, store.port, args, result_dir),
                           nprocs=world_size, start_method="spawn", join=True)
        # Our own ranks' return values in a private temp dir (not weights, not user input).
        results = []
        for r in range(world_size):
            with open(Path(result_dir) / f"rank{r}.pkl", "rb") as f:
                results.append(pickle.load(f))
        return results
