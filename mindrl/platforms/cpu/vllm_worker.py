"""Imported by vLLM in every worker process of a CPU engine, before the model loads: the CPU
build names `WorkerStart` as vLLM's `worker_extension_cls` (vllm_build.py), and vLLM imports
that class in `init_worker`, in the engine's own process at infer TP 1 and in each spawned TP
worker above it. Importing it sets the worker up in two ways:

- The garbage collector's view of what the worker has imported so far (torch and vLLM: ~700k
  objects) is frozen. vLLM collects the whole heap five times while a worker starts, 0.38 s
  each on that heap: ~2 s of CPU per TP worker. Frozen objects are never freed by a
  collection; vLLM freezes its heap itself once it has started, so nothing that would have
  been freed is kept.
- torch.compile is off. vLLM runs eagerly on CPU (enforce_eager), yet its sampler's log-prob
  ranks and, at TP > 1, its vocabulary-parallel embedding mask are `torch.compile`d helpers:
  the first generate traced them and built inductor kernels, hashing torch's sources on the
  way (measured: 1.6 s per TP1 engine, 2.8 s at TP2, ~4 s of CPU per TP worker, more with a
  cold compile cache). Run as plain functions they compute the same integers. Nothing else
  that shares a process with vLLM compiles on CPU (platforms/fused_kernels.py).
"""

import gc

import torch._dynamo

gc.freeze()
torch._dynamo.config.disable = True


class WorkerStart:
    """No methods: vLLM mixes this class into its worker class, and importing this module is
    the whole effect (see the module docstring)."""
