"""The torchvision shim: lets the CUDA-only torchvision wheel import beside CPU torch.

Why: vLLM's Qwen2.5-VL and transformers' AutoProcessor need torchvision, and the only build for
torch 2.13 on our index (0.28.0) ships a ``_C.so`` linked against libtorch_cuda. Beside CPU torch
that library fails to load, which torchvision tolerates, but its ``_meta_registrations`` then
registers fake kernels for ``torchvision::nms`` / ``qnms``, ops only ``_C.so`` defines, and
``import torchvision`` dies with "operator torchvision::nms does not exist"
(docs/platforms.md#torchvision-beside-cpu-torch). Defining those two op schemas first is
enough: everything Qwen-VL uses (the image transforms) works; ``torchvision.ops.nms`` itself
still does not.

The definitions must run before torchvision's first import in EVERY process (Ray workers and
vLLM's subprocesses included), so ``python -m mindrl.platforms.cpu.torchvision_shim --install``
writes a ``.pth`` file into the running interpreter's site-packages. Its one line installs a
``sys.meta_path`` finder that does nothing until ``torchvision`` is about to be imported; then it
defines the schemas and steps aside. The line carries its own code (the three hook objects below,
copied by source) and imports neither mindrl nor torch at interpreter start-up.

Where torchvision's own ops library does load (a matching build), the hook loads it and defines
nothing, so the shim is harmless there.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "mindrl_torchvision_shim.pth"


# ------------------------------------------------------- hook code, copied into the .pth line
# These three must stay self-contained: no mindrl imports, no module-level names.


def define_torchvision_op_schemas():
    """Define ``torchvision::nms`` and ``qnms`` (their schemas only, no kernels) unless
    torchvision's ``_C`` library loads and defines them itself. Returns the names it defined;
    calling it again defines nothing."""
    import glob
    import importlib.machinery
    import os

    import torch

    spec = importlib.machinery.PathFinder.find_spec("torchvision")
    for folder in (spec and spec.submodule_search_locations) or ():
        for lib in glob.glob(os.path.join(folder, "_C*.so")):
            try:
                torch.ops.load_library(lib)   # what torchvision would do first anyway
                return []
            except OSError:
                pass
    defined = []
    for name in ("nms", "qnms"):
        if not hasattr(torch.ops.torchvision, name):
            torch.library.define(f"torchvision::{name}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            defined.append(name)
    return defined


class TorchvisionImportHook:
    """A ``sys.meta_path`` finder that runs ``define_torchvision_op_schemas`` once, when
    ``torchvision`` is first looked up, and then lets the ordinary finders load it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            import sys
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                define_torchvision_op_schemas()
            except Exception as e:   # torchvision's own import error will follow
                sys.stderr.write(f"mindrl torchvision shim: {type(e).__name__}: {e}\n")
        return None


def install_import_hook():
    """Put one ``TorchvisionImportHook`` first on ``sys.meta_path`` (none if torchvision is
    imported already or a hook is in place)."""
    import sys
    if "torchvision" in sys.modules:
        return
    if not any(type(f).__name__ == "TorchvisionImportHook" for f in sys.meta_path):
        sys.meta_path.insert(0, TorchvisionImportHook())


_HOOK_OBJECTS = (define_torchvision_op_schemas, TorchvisionImportHook, install_import_hook)


# ------------------------------------------------------------------------ the .pth file


def pth_text() -> str:
    """The .pth file's content: one ``import`` line (site.py executes those) that execs the
    hook objects' source in a namespace of its own and installs the hook."""
    source = "\n\n".join(inspect.getsource(obj) for obj in _HOOK_OBJECTS)
    source += "\ninstall_import_hook()\n"
    return (f"import sys; exec({source!r}, "
            f"{{'__name__': 'mindrl_torchvision_shim_pth'}})\n")


def site_packages() -> Path:
    """This interpreter's (the venv's) site-packages."""
    return Path(sysconfig.get_paths()["purelib"])


def install(target_dir: Path | None = None) -> tuple[Path, bool]:
    """Write the .pth file into ``target_dir`` (default: site-packages). Idempotent: returns
    (path, whether it was written) and leaves an up-to-date file alone."""
    path = (Path(target_dir) if target_dir is not None else site_packages()) / PTH_NAME
    text = pth_text()
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return path, False
    tmp = path.with_name(f".{PTH_NAME}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)   # never a half-written .pth: site.py would run it in every process
    return path, True


def uninstall(target_dir: Path | None = None) -> bool:
    path = (Path(target_dir) if target_dir is not None else site_packages()) / PTH_NAME
    existed = path.is_file()
    path.unlink(missing_ok=True)
    return existed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--install", action="store_true",
                       help=f"write {PTH_NAME} into this interpreter's site-packages")
    group.add_argument("--uninstall", action="store_true", help=f"remove {PTH_NAME}")
    parser.add_argument("--target-dir", type=Path, default=None,
                        help="write there instead of site-packages")
    args = parser.parse_args(argv)
    if args.install:
        path, written = install(args.target_dir)
        print(f"torchvision shim: {path} {'written' if written else 'already up to date'}")
    else:
        removed = uninstall(args.target_dir)
        print(f"torchvision shim: {'removed' if removed else 'was not installed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
