"""The CPU compatibility layer (mindrl/platforms/cpu/megatron_compat.py): its CUDA -> CPU mode
covers the process, Megatron's pass steps run without it, and the literal-"cuda" sites a pass
can reach run under it again, in every module that imported them. In a fresh process: the
layer patches torch.cuda and enters a process-wide mode, which the test worker must not get."""

import json
import os
import subprocess
import sys

PROBE = r"""
import json, torch
from mindrl import device
device.prepare_megatron()
from torch.overrides import _get_current_function_mode
from mindrl.platforms.cpu import megatron_compat as compat
import megatron.core.pipeline_parallel.schedules as schedules
import megatron.core.transformer.utils as transformer_utils
import megatron.core.fusions.fused_softmax as fused_softmax

found = {"mode_outside": _get_current_function_mode() is compat._MODE,
         "cuda_outside": torch.zeros(1, device="cuda").device.type,
         "steps_wrapped": [getattr(f, "__wrapped_by_mindrl__", False)
                           for f in (schedules.forward_step, schedules.backward_step)],
         "importer_rebound": fused_softmax.get_default_causal_mask
                             is transformer_utils.get_default_causal_mask}
with compat._mode_suspended():
    found["mode_inside"] = _get_current_function_mode() is compat._MODE
    found["current_device_inside"] = torch.zeros(
        1, device=torch.cuda.current_device()).device.type
    found["mask_inside"] = transformer_utils.get_default_causal_mask(3).device.type
    found["mode_after_site"] = _get_current_function_mode() is compat._MODE
    try:
        torch.zeros(1, device="cuda")
        found["literal_cuda_inside"] = "cpu"
    except (RuntimeError, AssertionError):   # "Torch not compiled with CUDA enabled"
        found["literal_cuda_inside"] = "refused"
found["mode_restored"] = _get_current_function_mode() is compat._MODE
print(json.dumps(found))
"""


def test_passes_run_without_the_mode_and_their_cuda_sites_with_it():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "MINDRL_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {
        "mode_outside": True, "cuda_outside": "cpu",            # construction, optimizer
        "steps_wrapped": [True, True],                          # forward_step, backward_step
        "importer_rebound": True,                               # fused_softmax's own name
        "mode_inside": False,                                   # a pass: plain torch
        "current_device_inside": "cpu",                         # SP gathers, rotary, p2p
        "mask_inside": "cpu", "mode_after_site": False,         # a site resumes, then leaves
        "literal_cuda_inside": "refused",                       # a missed site fails loudly
        "mode_restored": True}
