"""The torchvision shim (mindrl/platforms/cpu/torchvision_shim.py): the installed .pth lets every
process (plain python, vLLM, Ray workers) import torchvision, and costs nothing until then.
vLLM's own child process importing torchvision beside vLLM and its Qwen2.5-VL model:
tests/platforms/test_vllm_inspection_subprocess.py."""

import json
import os
import subprocess
import sys

import pytest

from mindrl.platforms.cpu import torchvision_shim as shim


def _run(code, cwd="/"):
    """`code` in a fresh interpreter of this venv, mindrl not on its path (cwd "/", no
    PYTHONPATH): what site.py's .pth handling alone gives a process. Returns stdout's last line
    parsed as JSON."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torchvision shim" not in out.stderr, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_installed_pth_is_current():
    path = shim.site_packages() / shim.PTH_NAME
    assert path.is_file(), (f"run: {sys.executable} -m mindrl.platforms.cpu.torchvision_shim "
                            f"--install")
    assert path.read_text() == shim.pth_text(), "stale .pth: rerun the --install entry"


def test_install_is_idempotent_and_writes_one_import_line(tmp_path):
    path, written = shim.install(tmp_path)
    assert written and path == tmp_path / shim.PTH_NAME
    assert shim.install(tmp_path) == (path, False)
    lines = path.read_text().splitlines()
    # site.py executes only lines starting with "import"; any other line is taken as a path.
    assert len(lines) == 1 and lines[0].startswith("import ")
    assert "mindrl." not in lines[0].replace("mindrl_torchvision_shim", "")
    assert shim.uninstall(tmp_path) and not path.exists()


def test_hook_is_lazy_at_start_up():
    """A process that never imports torchvision has neither torch nor mindrl loaded, and the
    hook waits on sys.meta_path ahead of the finder that would load torchvision."""
    got = _run("import sys, json; "
               "names = [getattr(f, '__name__', type(f).__name__) for f in sys.meta_path]; "
               "print(json.dumps([sorted(m for m in sys.modules if "
               "m.split('.')[0] in ('torch', 'torchvision', 'mindrl')), "
               "names.count('TorchvisionImportHook'), "
               "names.index('TorchvisionImportHook') < names.index('PathFinder')]))")
    assert got == [[], 1, True]


def test_import_torchvision_in_a_fresh_process():
    """torchvision imports, its image transforms (what Qwen-VL's processors use) run, the hook
    has left sys.meta_path, and the two schemas exist."""
    got = _run(
        "import json, sys, torch, torchvision\n"
        "from torchvision.transforms.v2 import functional as F\n"
        "x = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)\n"
        "y = F.resize(x, [8, 12], antialias=True)\n"
        "print(json.dumps([torchvision.__version__, list(y.shape),"
        " any(type(f).__name__ == 'TorchvisionImportHook' for f in sys.meta_path),"
        " hasattr(torch.ops.torchvision, 'nms'), hasattr(torch.ops.torchvision, 'qnms')]))")
    assert got[1:] == [[2, 3, 8, 12], False, True, True]
    assert got[0].startswith("0.28.0")


@pytest.fixture()
def local_ray():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80 * 2**20,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_worker_imports_torchvision(local_ray):
    @local_ray.remote
    def tv_in_worker():
        import os
        import sys

        import torch
        import torchvision
        from torchvision.transforms.v2 import functional as F

        y = F.resize(torch.ones(1, 3, 4, 4), [2, 2], antialias=True)
        return os.getpid(), torchvision.__version__, float(y.sum()), sys.executable

    pid, version, total, exe = local_ray.get(tv_in_worker.remote(), timeout=120)
    assert pid != os.getpid() and exe == sys.executable
    assert version.startswith("0.28.0") and total == pytest.approx(12.0)
