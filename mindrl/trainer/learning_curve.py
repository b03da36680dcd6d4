"""Is a reward curve learning, and does it hold what it learned? (pure functions)

The embedded recipe's bar (issue 13), shared by the learning test and bench/bench_learning.py:
the mean of the last `edge` steps beats the first `edge` by `min_gain`, and once the
`window`-step moving average first reaches `threshold` it never falls more than `max_drop`
below its best value so far (a collapse after learning is a failure even if it recovers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class CurveSummary:
    first: float                 # mean over the first `edge` steps
    last: float                  # mean over the last `edge` steps
    crossed_at: Optional[int]    # index of the first full-window average >= threshold
    max_drop: float              # largest fall of that average below its running best after
                                 # crossing (0 when it never crossed)

    @property
    def gain(self) -> float:
        return self.last - self.first

    def passes(self, min_gain: float = 0.5, max_drop: float = 0.15) -> bool:
        return self.gain >= min_gain and self.max_drop <= max_drop

    def describe(self) -> str:
        crossed = "never" if self.crossed_at is None else f"step {self.crossed_at + 1}"
        return (f"first {self.first:.3f} -> last {self.last:.3f} (gain {self.gain:+.3f}); "
                f"average crossed the threshold at {crossed}, largest fall after {self.max_drop:.3f}")


def policy_scores(rows: Sequence[dict]) -> list:
    """Per-step mean score of the policy on that step's fresh prompts, from metrics.jsonl rows
    (validation-only rows skipped). With dynamic sampling the batch keeps only informative
    groups, so its critic/score is not the policy's: the raw score of everything generated is."""
    return [row.get("dynamic_sampling/raw_score_mean", row["critic/score/mean"])
            for row in rows if "critic/score/mean" in row]


def full_window_means(values: Sequence[float], window: int) -> list:
    """Mean of each complete `window` of consecutive values (len - window + 1 of them)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        if i >= window - 1:
            out.append(acc / window)
    return out


def summarize_curve(scores: Sequence[float], edge: int = 50, window: int = 20,
                    threshold: float = 0.6) -> CurveSummary:
    """Per-step mean scores (step 1 first) -> the figures the bar is judged on."""
    if len(scores) < max(edge, window):
        raise ValueError(f"{len(scores)} steps are fewer than edge={edge} / window={window}")
    first = sum(scores[:edge]) / edge
    last = sum(scores[-edge:]) / edge
    averages = full_window_means(scores, window)
    crossed = next((i for i, a in enumerate(averages) if a >= threshold), None)
    drop = 0.0
    if crossed is not None:
        best = averages[crossed]
        for a in averages[crossed:]:
            best = max(best, a)
            drop = max(drop, best - a)
    return CurveSummary(first, last, None if crossed is None else crossed + window - 1, drop)
