"""Where the repository's shipped files live, whatever the working directory."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def config_dir() -> Path:
    """configs/ of this checkout; MINDRL_CONFIG_DIR points elsewhere (e.g. an installed copy)."""
    return Path(os.environ.get("MINDRL_CONFIG_DIR", REPO_ROOT / "configs")).resolve()


def model_config_path(name: str) -> Path:
    return config_dir() / "model" / f"{name}.yaml"
