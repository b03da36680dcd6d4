"""Where metrics go: console, tensorboard, wandb (offline works without a network), and a
reward-curve PNG at the end, all inside the run directory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from mindrl.trainer.metrics import moving_average

CURVE_KEY = "critic/score/mean"


def _complete_rows(text: str) -> List[dict]:
    """metrics.jsonl rows; a last line cut short by a kill is not a row."""
    lines = [line for line in text.splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return rows


class Tracker:
    def __init__(self, run_dir: Path, use_tensorboard: bool = True, use_wandb: bool = False,
                 wandb_project: Optional[str] = None, wandb_exp_name: Optional[str] = None,
                 wandb_mode: str = "offline", config: Optional[dict] = None,
                 wandb_dir: Optional[str] = None):
        """wandb_dir: where wandb writes its local files (rl_config.wandb_save_dir); null =
        the run directory."""
        self.run_dir = Path(run_dir)
        self.history: List[Dict[str, float]] = []
        self.tb = self.wandb = None
        if use_tensorboard:
            self.tb = self._tensorboard()
        if use_wandb:
            os.environ.setdefault("WANDB_MODE", wandb_mode)
            import wandb

            save_dir = Path(wandb_dir) if wandb_dir else self.run_dir
            save_dir.mkdir(parents=True, exist_ok=True)   # wandb falls back to /tmp otherwise
            self.wandb = wandb.init(project=wandb_project or "mindrl", name=wandb_exp_name,
                                    dir=str(save_dir), config=config or {}, mode=wandb_mode)
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a")

    def _tensorboard(self, purge_step: Optional[int] = None):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), purge_step=purge_step)

    def rewind(self, step: int) -> None:
        """A resumed run restarts after checkpoint `step`: rows of steps after it (done, then
        lost with a crash) are dropped from metrics.jsonl and tensorboard, so every step is
        recorded once; the rows up to it become the history (the PNG shows the whole run)."""
        self._jsonl.close()
        path = self.run_dir / "metrics.jsonl"
        rows = _complete_rows(path.read_text())
        self.history = [r for r in rows if r["step"] <= step]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.history))
        os.replace(tmp, path)
        self._jsonl = open(path, "a")
        if self.tb is not None and len(rows) > len(self.history):
            self.tb.close()
            self.tb = self._tensorboard(purge_step=step + 1)

    def log(self, step: int, metrics: Dict[str, float],
            distributions: Optional[Mapping[str, Sequence[float]]] = None) -> None:
        """The step's scalars everywhere; `distributions` (a value per sample, e.g. each
        sample's staleness) as histograms in tensorboard and wandb, whose summaries the
        scalars already carry (metrics.jsonl keeps scalars only)."""
        self.history.append({"step": step, **metrics})
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        hists = {k: [float(v) for v in values] for k, values in (distributions or {}).items()}
        if self.tb is not None:
            for key, value in metrics.items():
                self.tb.add_scalar(key, value, step)
            for key, values in hists.items():
                self.tb.add_histogram(key, np.asarray(values, dtype=np.float64), step)
            self.tb.flush()
        if self.wandb is not None:
            import wandb

            self.wandb.log({**metrics, **{k: wandb.Histogram(v) for k, v in hists.items()}},
                           step=step)

    def reward_curve(self, path: Optional[Path] = None, window: int = 20) -> Optional[Path]:
        """critic/score/mean per step and its moving average, as a PNG."""
        points = [(h["step"], h[CURVE_KEY]) for h in self.history if CURVE_KEY in h]
        if not points:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps, values = zip(*points)
        path = Path(path or self.run_dir / "reward_curve.png")
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(steps, values, alpha=0.35, label="mean score per step")
        ax.plot(steps, moving_average(values, window), label=f"moving average ({window})")
        val = [(h["step"], h["val/score"]) for h in self.history if "val/score" in h]
        if val:
            ax.plot(*zip(*val), "o-", label="validation score (greedy)")
        ax.set_xlabel("step")
        ax.set_ylabel("critic/score/mean")
        ax.set_title("GRPO reward")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def close(self) -> None:
        self._jsonl.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
