"""What the asynchronous loop logs each step (pure functions; trainer/async_source.py).

Staleness counts policy versions: a sample generated on weights version v and trained by step
s (whose update starts from the weights after s - 1 updates) is s - 1 - v versions stale. The
time metrics come from intervals on one clock (time.perf_counter): when generation ran (each
submitted batch from submission to its last engine's answer) and when the actor trained (the
log-prob passes and the update), over the step's window up to the weight sync.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

import torch

Interval = Tuple[float, float]


def staleness_metrics(policy_version: torch.Tensor, actor_version: int) -> Dict[str, float]:
    """rollout/staleness_mean and _max over the batch's samples, and rollout/stale_fraction:
    the share generated on weights older than the update's."""
    stale = (actor_version - policy_version).float()
    return {"rollout/staleness_mean": stale.mean().item(),
            "rollout/staleness_max": stale.max().item(),
            "rollout/stale_fraction": (stale > 0).float().mean().item()}


def covered(intervals: Iterable[Interval], window: Interval) -> float:
    """Seconds of `window` inside the union of `intervals`."""
    lo, hi = window
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo))
    total, end = 0.0, lo
    for a, b in clipped:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def timeline_metrics(generating: List[Interval], training: Interval, window: Interval,
                     actor_wait_s: float) -> Dict[str, float]:
    """async/overlap_fraction: the share of the actor's training time during which engines
    generated; async/engine_idle_s: the window's seconds with no generation running (engines
    waiting for admission, the sync, scoring); async/actor_wait_s: the actor's seconds waiting
    for samples (the step's batch, and in-flight batches before the sync)."""
    train_s = training[1] - training[0]
    return {"async/overlap_fraction": covered(generating, training) / train_s
            if train_s > 0 else 0.0,
            "async/engine_idle_s": (window[1] - window[0]) - covered(generating, window),
            "async/actor_wait_s": actor_wait_s}
