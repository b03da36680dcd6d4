"""Local multi-process launch (one rank per process, this device's backend).

Used by tests, benchmarks and single-node tools; Ray workers use mindrl.device directly.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Sequence

import torch


# Ranks fork from one server process (per parent process) that has imported what every rank
# imports (mindrl/rank_imports.py): a rank starts in a tenth of a second instead of spending
# 3-4 s of CPU importing torch and Megatron again. The server initialises no device and joins
# no process group, so forking from it is safe, and every rank starts from its clean state,
# never from another rank's. A rank takes the caller's environment, working directory and
# sys.path as they are at the call (the server's are those of its start).
RANK_IMPORTS = ["mindrl.rank_imports"]


def _rank_entry(rank: int, call: bytes, world_size: int, port: int, caller: tuple,
                result_dir: str) -> None:
    env, cwd, path = caller
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = path
    fn, args = pickle.loads(call)    # after sys.path: fn may live where only the caller looks
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
    """Run fn(rank, world_size, *args) in world_size processes; return their results.

    fn must be importable by name (module-level); results travel through pickle files.
    """
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.get_context("forkserver").set_forkserver_preload(RANK_IMPORTS)
    call = pickle.dumps((fn, args))
    caller = (dict(os.environ), os.getcwd(), list(sys.path))
    with tempfile.TemporaryDirectory(prefix="mindrl-spawn-") as result_dir:
        from mindrl import device

        store = device.listening_store()   # held by this process until the ranks are done
        mp.start_processes(_rank_entry, args=(call, world_size, store.port, caller, result_dir),
                           nprocs=world_size, start_method="forkserver", join=True)
        # Our own ranks' return values in a private temp dir (not weights, not user input).
        results = []
        for r in range(world_size):
            with open(Path(result_dir) / f"rank{r}.pkl", "rb") as f:
                results.append(pickle.load(f))
        return results
