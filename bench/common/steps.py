"""A framework's step rows summed up (MindRL's from metrics.jsonl, TRL's from its own timings):
the warm-up step left out, step seconds (min and median), the phases' and tokens/s medians, the
completion lengths seen, and the rewards at the start and the end."""

from __future__ import annotations

import math
import statistics
from typing import List, Sequence

MIN_TIMED_STEPS = 5


def length_summary(lengths: Sequence[float]) -> dict:
    """mean, p50, p90 (linear interpolation between order statistics), max, samples."""
    values = sorted(float(v) for v in lengths)
    if not values:
        return {"mean": None, "p50": None, "p90": None, "max": None, "samples": 0}

    def quantile(q: float) -> float:
        at = q * (len(values) - 1)
        low = math.floor(at)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (at - low)

    return {"mean": statistics.fmean(values), "p50": quantile(0.5), "p90": quantile(0.9),
            "max": values[-1], "samples": len(values)}



def timed_steps(steps: List[dict]) -> List[dict]:
    """The steps after the first, which is warm-up (all of them if there is only one)."""
    return steps[1:] if len(steps) > 1 else steps


def completion_distribution(timed: List[dict]) -> dict:
    """The completion lengths a framework saw over its timed steps: exact from every sample
    where the run gave them (TRL), else from the per-step statistics (MindRL: mean of the
    step means, max of the maxima, median of the step p50 / p90 when logged, else null)."""
    if all("completion_lengths" in s for s in timed):
        return {**length_summary([n for s in timed for n in s["completion_lengths"]]),
                "source": "every sample"}
    stats = [s["completion_length"] for s in timed]

    def median_of(key):
        values = [st[key] for st in stats]
        return None if None in values else statistics.median(values)

    return {"mean": statistics.fmean(st["mean"] for st in stats), "p50": median_of("p50"),
            "p90": median_of("p90"), "max": max(st["max"] for st in stats),
            "samples": None, "source": "per-step statistics (metrics.jsonl)"}


def summary(steps: List[dict]) -> dict:
    """Medians (and the step's min) over the timed steps."""
    timed = timed_steps(steps)
    if len(timed) < MIN_TIMED_STEPS:
        print(f"warning: only {len(timed)} timed step(s) after warm-up "
              f"(fewer than {MIN_TIMED_STEPS}): min and median are rough", flush=True)
    med = {k: statistics.median(s[k] for s in timed)
           for k in ("step_s", "gen_s", "logprob_s", "update_s", "sync_s", "reward_s")}
    window = max(1, min(20, len(steps) // 4))
    rewards = [s.get("reward", float("nan")) for s in steps]
    return {**med, "step_s_min": min(s["step_s"] for s in timed),
            "step_s_median": med["step_s"], "timed_steps": len(timed),
            "completion_tokens_per_step": statistics.median(s["completion_tokens"]
                                                            for s in timed),
            "completion_tokens_per_s": statistics.median(s["completion_tokens"] / s["step_s"]
                                                         for s in timed),
            "completion_length": completion_distribution(timed),
            "reward_first": statistics.fmean(rewards[:window]),
            "reward_last": statistics.fmean(rewards[-window:]), "steps": len(steps)}
