"""Whether a request's environment would have imported what its server did.

Imports that read the environment read the server's, so the server refuses (and the client
starts plainly) a request whose environment differs from its own in any variable those
libraries read at import (`IMPORT_TIME_ENV`). A PYTHONPATH that only puts directories in front
of the server's is taken when nothing the server imported could have come from them
(`shadowed`): the fork gets them on its path, with their `sitecustomize` (fork.py).
"""

from __future__ import annotations

import os
import sys
from typing import Dict, Optional

# Environment variables (by prefix) that these libraries may read while they import: a
# request must carry the server's values for every one of them.
IMPORT_TIME_ENV = ("VLLM_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "CUDA", "HF_",
                   "TRANSFORMERS", "TOKENIZERS", "PYTHON", "LD_", "NVTE_", "TRITON", "MEGATRON",
                   "NCCL", "GLOO", "MINDRL_DEVICE")
# ... except these, which vLLM's import sets in whatever process imports it (a driver, a test
# process) and that process's children inherit: torch reads the inductor ones when it compiles
# (a CPU worker never does) and NVML's check when it looks for CUDA; Triton and TileLang are
# absent on CPU; the loader reads LD_LIBRARY_PATH when a process starts (vLLM adds OpenCV's
# bundled libraries to it), which a fork never does. Ray's driver sets PYTHONBREAKPOINT, read
# at each breakpoint(); the collective backends read their interface when a group is made; no
# interpreter reads a variable named PYTHON (scripts name an interpreter with it), and no
# Hugging Face library reads HF_DIR or HF_OUT_DIR (examples/ckpt's scripts' own folders).
USE_TIME_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS",
                "PYTORCH_NVML_BASED_CUDA_CHECK", "TRITON_CACHE_AUTOTUNING",
                "TILELANG_CLEANUP_TEMP_FILES", "LD_LIBRARY_PATH", "PYTHONBREAKPOINT",
                "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "PYTHON", "HF_DIR", "HF_OUT_DIR",
                "PYTHONUNBUFFERED", "RAY_ADDRESS")
# (PYTHONUNBUFFERED, read at an interpreter's start: a fork makes its streams write through;
# RAY_ADDRESS, read by ray.init.)
PATH_ENV = "PYTHONPATH"


class ImportTimeEnv:
    """The server's import-time environment, before and after its imports (`prefixes`: its
    kind's variables besides IMPORT_TIME_ENV), to hold each request against."""

    def __init__(self, before: Dict[str, str], prefixes: tuple = ()):
        self.prefixes = prefixes
        self.before = _import_env(before, prefixes)
        self.after = _import_env(dict(os.environ), prefixes)

    def refusal(self, env: Dict[str, str]):
        """(why a request with `env` must start plainly, None) or (None, the directories its
        PYTHONPATH adds)."""
        added = added_path(self.before.get(PATH_ENV), env.get(PATH_ENV))
        differs = [k for k in _differences(self.before, self.after,
                                           _import_env(env, self.prefixes))
                   if not (k == PATH_ENV and added is not None)]
        if differs:
            values = "; ".join(f"{k} {self.before.get(k)!r} vs {env.get(k)!r}"
                               for k in differs)
            return f"environment differs in {', '.join(differs)}: {values}", None
        hidden = shadowed(added, {name.split(".")[0] for name in sys.modules})
        if hidden:
            return (f"{PATH_ENV} adds what this server imported from elsewhere: "
                    f"{', '.join(hidden)}", None)
        return None, added


def _import_env(env: Dict[str, str], extra: tuple = ()) -> Dict[str, str]:
    prefixes = IMPORT_TIME_ENV + tuple(extra)
    return {k: v for k, v in env.items() if k.startswith(prefixes) and k not in USE_TIME_ENV}


def _differences(before: Dict[str, str], after: Dict[str, str],
                 theirs: Dict[str, str]) -> list:
    """Variables whose value in a request is not what this server's imports saw: the value
    before the imports, or for one the imports set themselves, the value they set (a worker
    started with it set imports as this server did)."""
    return sorted(k for k in set(before) | set(after) | set(theirs)
                  if theirs.get(k) != before.get(k)
                  and not (before.get(k) != after.get(k) and theirs.get(k) == after.get(k)))


def added_path(mine: Optional[str], theirs: Optional[str]) -> Optional[list]:
    """The directories a request's PYTHONPATH puts in front of this server's, or None when it
    is not this server's with directories added in front."""
    mine_dirs = [d for d in (mine or "").split(os.pathsep) if d]
    their_dirs = [d for d in (theirs or "").split(os.pathsep) if d]
    kept = len(their_dirs) - len(mine_dirs)
    if kept < 0 or their_dirs[kept:] != mine_dirs:
        return None
    return their_dirs[:kept]


def shadowed(directories, imported) -> list:
    """Entries of `directories` named like a top-level module in `imported` (or a
    `usercustomize`, which this helper never imports): what a fresh interpreter would have
    imported from there instead of what the server did."""
    names = set(imported) | {"usercustomize"}
    found = set()
    for directory in directories:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        found.update(f"{directory}/{entry}" for entry in entries
                     if entry.split(".")[0] in names)
    return sorted(found)
