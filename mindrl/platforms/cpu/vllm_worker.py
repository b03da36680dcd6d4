"""Imported by vLLM in every worker process of a CPU engine, before the model loads: the CPU
build names `FrozenImports` as vLLM's `worker_extension_cls` (vllm_build.py), and vLLM imports
that class in `init_worker`.

Importing it freezes the garbage collector's view of what the worker has imported so far
(torch and vLLM: ~700k objects). vLLM collects the whole heap five times while a worker
starts (after loading weights, twice; cleaning up its profiling KV cache; ...), 0.38 s each on
that heap: ~2 s of CPU per TP worker, which spawned TP workers otherwise pay (the engine's
own process freezes its heap before `LLM()`, engines/vllm_engine.py). Frozen objects are never
freed by a collection; vLLM freezes its heap itself once it has started, so nothing that would
have been freed is kept.
"""

import gc

gc.freeze()


class FrozenImports:
    """No methods: vLLM mixes this class into its worker class, and importing this module is
    the whole effect (see the module docstring)."""

