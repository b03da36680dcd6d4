"""The log-prob drift alarm: one warning when vLLM's sampled-token log-probs and the actor's
disagree (rollout/logprob_diff_mean above rl_config.logprob_drift_threshold) for
rl_config.logprob_drift_steps steps in a row, and again only after it clears and recurs.

Only steps trained on samples generated on the actor's own weights count: in the asynchronous
loop a sample generated one or more versions back differs from the actor by the updates since
as well (rollout/stale_fraction or rollout/crossed_update_frac above 0), which is no mismatch
between vLLM and the actor; such a step ends a streak.

A pure function of the tracker's history (rows {"step": n, **metrics}), so it holds no
state of its own and a resumed run (whose history is reloaded) keeps counting the same way.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

DRIFT_KEY = "rollout/logprob_diff_mean"
# A step's share of samples, or of tokens, generated on weights older than the update's.
STALE_KEYS = ("rollout/stale_fraction", "rollout/crossed_update_frac")


def _disagrees(row: Dict[str, float], threshold: float) -> bool:
    return row[DRIFT_KEY] > threshold and not any(row.get(k, 0.0) > 0 for k in STALE_KEYS)


def drift_streak(history: Sequence[Dict[str, float]], threshold: float) -> List[int]:
    """Steps of the run of consecutive steps, ending at the latest one that reports the
    diff, whose diff is above the threshold on samples of the actor's weights ([] when the
    latest is not). Rows without the key (a validation-only row) are skipped; a gap in step
    numbers ends a run."""
    rows = [row for row in history if DRIFT_KEY in row]
    streak: List[int] = []
    for row in reversed(rows):
        if not _disagrees(row, threshold) or (streak and row["step"] != streak[0] - 1):
            break
        streak.insert(0, row["step"])
    return streak


def drift_warning(history: Sequence[Dict[str, float]], threshold: Optional[float],
                  steps: int) -> Optional[str]:
    """The warning, exactly when the latest step makes the streak `steps` long; else None
    (also when threshold is None: the alarm is off)."""
    if threshold is None:
        return None
    streak = drift_streak(history, threshold)
    if len(streak) != steps:
        return None
    where = f"step {streak[0]}" if steps == 1 else f"steps {streak[0]}-{streak[-1]}"
    return (f"{DRIFT_KEY} above {threshold:g} for {steps} step{'s' if steps > 1 else ''} "
            f"in a row ({where}): vLLM and the actor disagree; check dtype, the weight sync, "
            f"or enable rl_config.rollout_is")


def warn_on_drift(history: Sequence[Dict[str, float]], rl, log: Callable[[str], None]
                  ) -> Optional[str]:
    """Log the drift warning for the latest step when due (rl: the run's rl_config)."""
    message = drift_warning(history, rl.logprob_drift_threshold, rl.logprob_drift_steps)
    if message is not None:
        log(f"warning: {message}")
    return message
