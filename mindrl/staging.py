"""Write-then-rename for output directories (docs/design.md#conventions: bad input
loses nothing).

On the ground floor: the converter (ckpt/) and the tiny-model factory (models/) both write
through it. A conversion writes into a hidden sibling of the target (same filesystem, so the final
rename is atomic) and moves it into place only when everything is written. An interrupted
or failed conversion leaves the target exactly as it was; a killed one leaves at worst a
hidden ``.NAME.tmp-*`` sibling, never a half checkpoint under the target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Type


class SaveDirError(ValueError):
    """The output directory cannot be used as asked (exists, not empty, overlaps the input)."""


def check_save_dir(save_dir: Path, overwrite: bool, load_dir: Path | None = None) -> None:
    """Refuse a non-empty target without overwrite, a file, or a target overlapping the input."""
    save_dir = Path(save_dir).expanduser().resolve()
    if load_dir is not None:
        load_dir = Path(load_dir).expanduser().resolve()
        if save_dir == load_dir or load_dir in save_dir.parents or save_dir in load_dir.parents:
            raise SaveDirError(f"--save-dir {save_dir} overlaps --load-dir {load_dir}; "
                               f"write the converted checkpoint to a separate directory")
    refuse_occupied(save_dir, overwrite, SaveDirError, f"--save-dir {save_dir}",
                    "pass --overwrite to replace it (nothing was written)")


def refuse_occupied(target: Path, overwrite: bool, error: Type[Exception], label: str,
                    fix: str) -> None:
    """Refuse a target that is a file, or a non-empty directory unless overwriting: raises
    ``error`` naming ``label`` (and ``fix`` for the non-empty case)."""
    if target.exists():
        if not target.is_dir():
            raise error(f"{label} exists and is not a directory")
        if any(target.iterdir()) and not overwrite:
            raise error(f"{label} is not empty; {fix}")


def _move_into_place(tmp: Path, target: Path) -> None:
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    os.rename(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(save_dir: Path, overwrite: bool,
               check: Callable[[Path, bool], None] = check_save_dir) -> Iterator[Path]:
    """Yield an empty temporary directory that becomes ``save_dir`` if the block succeeds.
    check(save_dir, overwrite) runs again before the rename: someone may have written there
    meanwhile (callers run it first too, to refuse before any work)."""
    save_dir = Path(save_dir).expanduser().resolve()
    save_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=save_dir.parent, prefix=f".{save_dir.name}.tmp-"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would make the result private
    try:
        yield tmp
        check(save_dir, overwrite)
        _move_into_place(tmp, save_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
