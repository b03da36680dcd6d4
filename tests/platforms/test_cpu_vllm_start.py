"""A vLLM engine's process on CPU and the TP workers it spawns run torch.compile'd helpers as
plain functions (platforms/cpu/vllm_start.py); processes started afterwards inherit the
environment as it was."""

import multiprocessing
import os

from mindrl.platforms.cpu.vllm_start import COMPILE_DISABLE, workers_compile_off


def _dynamo_disabled(queue) -> None:
    import torch._dynamo

    queue.put(torch._dynamo.config.disable)


def _child_disables_dynamo() -> bool:
    ctx = multiprocessing.get_context("spawn")      # as vLLM starts its workers in Ray
    queue = ctx.Queue()
    child = ctx.Process(target=_dynamo_disabled, args=(queue,))
    child.start()
    disabled = queue.get(timeout=120)
    child.join()
    return disabled


def test_workers_started_inside_compile_nothing_and_later_processes_do():
    before = os.environ.get(COMPILE_DISABLE)
    with workers_compile_off():
        assert _child_disables_dynamo() is True
    assert os.environ.get(COMPILE_DISABLE) == before     # what later children inherit


def test_the_worker_extension_vllm_imports_freezes_the_heap():
    """The name the CPU build hands vLLM resolves, and importing it (as each TP worker does
    before loading its model) freezes what was imported before: vLLM's start-up collections
    then skip it. In a child: this process's heap stays as it is."""
    import subprocess
    import sys

    from mindrl.platforms.cpu.vllm_build import WORKER_EXTENSION

    module, name = WORKER_EXTENSION.rsplit(".", 1)
    code = ("import gc, importlib; before = gc.get_freeze_count(); "
            f"cls = getattr(importlib.import_module({module!r}), {name!r}); "
            "print(before, gc.get_freeze_count(), [m for m in vars(cls) if not m.startswith('__')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=2)
    assert out[0] == "0" and int(out[1]) > 1000 and out[2].strip() == "[]", out
