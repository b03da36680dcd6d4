"""Console scripts (mindrl-train-grpo, ...): run the thin scripts under cli/ as __main__.

The scripts stay the single implementation (Hydra's @main reads sys.argv, which the library
must not); these wrappers only make them reachable from PATH after `pip install -e .`.
"""

import runpy

from mindrl.paths import REPO_ROOT


def _run(script: str) -> None:
    runpy.run_path(str(REPO_ROOT / "cli" / script), run_name="__main__")


def train_grpo() -> None:
    _run("train_grpo.py")


def convert_ckpt() -> None:
    _run("convert_ckpt.py")


def preprocess_data() -> None:
    _run("preprocess_data.py")


def make_tiny_model() -> None:
    _run("make_tiny_model.py")
