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
