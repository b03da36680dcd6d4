"""OmegaConf resolvers that make recipe paths independent of the working directory.

  ${mindrl.work_dir:}    MINDRL_WORK_DIR, else <repo>/work: runs, data, converted models
  ${mindrl.config_dir:}  configs/ of this checkout (mindrl.paths.config_dir)
  ${mindrl.repo_dir:}    the repository root
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from mindrl.paths import REPO_ROOT, config_dir


def work_dir() -> Path:
    return Path(os.environ.get("MINDRL_WORK_DIR", REPO_ROOT / "work")).resolve()


def register_resolvers() -> None:
    """Idempotent; called on import of mindrl.config, before any recipe is composed."""
    for name, fn in (("mindrl.work_dir", lambda: str(work_dir())),
                     ("mindrl.config_dir", lambda: str(config_dir())),
                     ("mindrl.repo_dir", lambda: str(REPO_ROOT))):
        OmegaConf.register_new_resolver(name, fn, replace=True)
