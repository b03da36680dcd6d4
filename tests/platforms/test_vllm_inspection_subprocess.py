"""torchvision in the processes vLLM starts itself
(docs/platforms.md#torchvision-beside-cpu-torch).

vLLM inspects a model class in a child interpreter of its own (registry._run_in_subprocess,
`python -m vllm.model_executor.models.registry`); without torchvision there, engine creation
fails with "Model architectures ['Qwen2_5_VLForConditionalGeneration'] failed to be inspected".
vLLM caches the result by file hash, so a working engine start says nothing about that child:
this calls the child directly. The driver runs with mindrl off its path (cwd "/", no
PYTHONPATH), so only what the venv's site-packages gives every process can make it pass.
"""

import json
import os
import subprocess
import sys

import pytest

DRIVER = r"""
import json, sys
from vllm.model_executor.models.registry import _ModelInfo, _run_in_subprocess

def inspect_in_child():
    import os, sys
    import torchvision
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
    info = _ModelInfo.from_model_cls(Qwen2_5_VLForConditionalGeneration)
    return os.getpid(), torchvision.__version__, bool(info.supports_multimodal), \
        sorted(m for m in sys.modules if m.split(".")[0] == "mindrl")

import os
pid, version, multimodal, mindrl_modules = _run_in_subprocess(inspect_in_child)
print(json.dumps({"child_pid": pid, "parent_pid": os.getpid(), "torchvision": version,
                  "multimodal": multimodal,
                  "mindrl_modules": mindrl_modules}))
"""


@pytest.mark.slow
def test_vllm_model_inspection_child_imports_torchvision_and_qwen25vl():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", DRIVER], cwd="/", env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["child_pid"] != got["parent_pid"]          # really another interpreter
    assert got["torchvision"].startswith("0.28.0")
    assert got["multimodal"] is True
    assert got["mindrl_modules"] == []                     # the hook needs no mindrl module
    assert "mindrl torchvision shim" not in out.stderr      # the hook reported no failure
