"""Training progress a person can read both on a terminal and in a log file.

On a terminal: tqdm's bar (score, length, seconds per step) with the step's console line
printed above it every actor_config.log_interval steps. Anywhere else (`make demo > run.log`,
a scheduler's log): the same console lines as plain lines and nothing else; a bar there would
fill the log with carriage-return frames, several per step.
"""

from __future__ import annotations

import sys
from typing import Callable, Dict, Optional, TextIO

from mindrl.trainer.metrics import console_line


class StepProgress:
    def __init__(self, start: int, total: int, log_interval: int,
                 log: Callable[[str], None] = print, stream: Optional[TextIO] = None):
        """`stream`: where a bar would be drawn (tqdm's default, stderr); a bar is drawn only
        when it is a terminal. `log` prints the plain lines."""
        self.total, self.log_interval, self.log = total, max(log_interval, 1), log
        stream = sys.stderr if stream is None else stream
        self.bar = None
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc="GRPO", dynamic_ncols=True,
                            file=stream)

    def step_done(self, step: int, metrics: Dict[str, float]) -> None:
        due = step % self.log_interval == 0 or step == self.total
        if self.bar is None:
            if due:
                self.log(console_line(step, self.total, metrics))
            return
        if due:
            self.bar.write(console_line(step, self.total, metrics))
        self.bar.set_postfix(score=f"{metrics['critic/score/mean']:.3f}",
                             len=f"{metrics['response_length/mean']:.1f}",
                             s=f"{metrics['timing_s/step']:.2f}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
