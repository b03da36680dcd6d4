"""What an engine reports about its own start, read without starting vLLM."""

import dataclasses

from mindrl.config.schema import GenerateConfig
from mindrl.engines.vllm_settings import worker_start


def test_worker_start_is_in_process_for_one_worker_else_the_method_vllm_kept(monkeypatch):
    assert worker_start(GenerateConfig()) == "in-process"
    tp2 = dataclasses.replace(GenerateConfig(), infer_tensor_parallel_size=2)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")     # where vLLM forced it
    assert worker_start(tp2) == "spawn"
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD")
    assert worker_start(tp2) == "fork"                               # vLLM's default
