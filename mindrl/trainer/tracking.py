"""Where metrics go: console, tensorboard, wandb (offline works without a network), and a
reward-curve PNG at the end, all inside the run directory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Optional

from mindrl.trainer.metrics import moving_average

CURVE_KEY = "critic/score/mean"


class Tracker:
    def __init__(self, run_dir: Path, use_tensorboard: bool = True, use_wandb: bool = False,
                 wandb_project: Optional[str] = None, wandb_exp_name: Optional[str] = None,
                 wandb_mode: str = "offline", config: Optional[dict] = None):
        self.run_dir = Path(run_dir)
        self.history: List[Dict[str, float]] = []
        self.tb = self.wandb = None
        if use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if use_wandb:
            os.environ.setdefault("WANDB_MODE", wandb_mode)
            import wandb

            self.wandb = wandb.init(project=wandb_project or "mindrl", name=wandb_exp_name,
                                    dir=str(self.run_dir), config=config or {}, mode=wandb_mode)
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a")

    def log(self, step: int, metrics: Dict[str, float]) -> None:
        self.history.append({"step": step, **metrics})
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        if self.tb is not None:
            for key, value in metrics.items():
                self.tb.add_scalar(key, value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

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
