"""What vLLM imports in every worker of a CPU engine before its model loads
(platforms/cpu/vllm_worker.py): the heap imported so far frozen, torch.compile off."""

import subprocess
import sys

from mindrl.platforms.cpu.vllm_build import WORKER_EXTENSION


def test_the_worker_extension_vllm_imports_freezes_the_heap_and_turns_compile_off():
    """The name the CPU build hands vLLM resolves, and importing it (as each worker does in
    `init_worker`) freezes what was imported before, so vLLM's start-up collections skip it,
    and disables dynamo, so vLLM's compiled helpers run as plain functions. In a child: this
    process stays as it is."""
    module, name = WORKER_EXTENSION.rsplit(".", 1)
    code = ("import gc, importlib, torch._dynamo; before = gc.get_freeze_count(); "
            f"cls = getattr(importlib.import_module({module!r}), {name!r}); "
            "print(before, gc.get_freeze_count(), torch._dynamo.config.disable, "
            "[m for m in vars(cls) if not m.startswith('__')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=3)
    assert out[0] == "0" and int(out[1]) > 1000 and out[2] == "True", out
    assert out[3].strip() == "[]", out
