"""Start-up cost of every training run: what the driver pays before Ray starts.

`prepare` checks existing artifacts through mindrl.models.tiny on every run; importing it must
not pull transformers' image/video utilities (torchvision, ~2 s of CPU a run), which only
making a model needs."""

import subprocess
import sys


def test_tiny_model_module_does_not_import_torchvision():
    code = ("import sys, mindrl.models.tiny, mindrl.trainer.prepare; "
            "print(sorted(m for m in ('torchvision', 'mindrl.models.hf_config') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out
