"""Rule-based reward: a weighted sum of named verifiers, scored in a process pool."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .overlong import overlong_penalty
from .pool import ERROR, OK, TIMEOUT, VerifierPool
from .registry import get_verifier
from .user_modules import absolute, load_all

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OverlongConfig:
    """DAPO overlong penalty settings (see `overlong.overlong_penalty`)."""

    max_response_length: int
    overlong_buffer_len: int
    penalty_factor: float = 1.0


class RuleReward:
    """score = sum_i verifier_weight[i] * verifier_function[i](completion, label, **extra).

    A verifier that raises, kills its worker or runs past `verifier_timeout` scores 0 for that
    sample and is counted in `rewards/errors` / `rewards/timeouts`; scoring never stops.
    A weight of 0 keeps a verifier as a logged metric only.
    """

    def __init__(
        self,
        verifier_function: Sequence[str],
        verifier_weight: Sequence[float],
        verifier_timeout: float = 10.0,
        verifier_parallel: int = 2,
        *,
        overlong: Optional[OverlongConfig] = None,
        worker_imports: Sequence[str] = (),
        mp_context: str = "forkserver",
        memory_limit_mb: Optional[int] = None,
    ) -> None:
        names = list(verifier_function)
        weights = [float(w) for w in verifier_weight]
        if len(names) != len(weights):
            raise ValueError(
                f"verifier_function has {len(names)} entries but verifier_weight has "
                f"{len(weights)}: they must pair up one weight per verifier"
            )
        if not names:
            raise ValueError("verifier_function is empty: name at least one verifier")
        if len(set(names)) != len(names):
            raise ValueError(f"verifier_function lists a verifier twice: {names}")
        worker_imports = absolute(worker_imports)   # the workers load the same files
        load_all(worker_imports)  # custom verifiers must be known here and in the workers
        for name in names:
            get_verifier(name)  # fail at start-up, not on the first batch
        if overlong is not None:  # validates its settings
            overlong_penalty(
                [], overlong.max_response_length, overlong.overlong_buffer_len, overlong.penalty_factor
            )
        self.names = names
        self.weights = weights
        self.overlong = overlong
        self._pool = VerifierPool(
            num_workers=verifier_parallel,
            timeout=verifier_timeout,
            worker_imports=worker_imports,
            mp_context=mp_context,
            memory_limit_mb=memory_limit_mb,
        )

    @classmethod
    def from_config(cls, cfg: Mapping, **kwargs) -> "RuleReward":
        """From config keys verifier_function, verifier_weight, verifier_timeout,
        verifier_parallel and, optionally, overlong_buffer_len (> 0 enables the penalty, with
        max_response_length and overlong_penalty_factor)."""
        overlong = None
        if cfg.get("overlong_buffer_len"):
            overlong = OverlongConfig(
                max_response_length=int(cfg["max_response_length"]),
                overlong_buffer_len=int(cfg["overlong_buffer_len"]),
                penalty_factor=float(cfg.get("overlong_penalty_factor", 1.0)),
            )
        return cls(
            verifier_function=list(cfg["verifier_function"]),
            verifier_weight=list(cfg["verifier_weight"]),
            verifier_timeout=float(cfg.get("verifier_timeout", 10.0)),
            verifier_parallel=int(cfg.get("verifier_parallel", 2)),
            overlong=overlong,
            **kwargs,
        )

    def score(
        self,
        completions: Sequence[str],
        labels: Sequence[object],
        extras: Optional[Sequence[Optional[dict]]] = None,
        response_lengths: Optional[Sequence[int]] = None,
    ) -> Tuple[List[float], Dict[str, float]]:
        """(per-sample scores, metrics). `response_lengths` (tokens) is needed only when the
        overlong penalty is configured."""
        n = len(completions)
        extras = list(extras) if extras is not None else [None] * n
        if len(labels) != n or len(extras) != n:
            raise ValueError(
                f"score() got {n} completions, {len(labels)} labels and {len(extras)} extras"
            )
        if self.overlong is not None and (response_lengths is None or len(response_lengths) != n):
            raise ValueError("overlong penalty is configured: pass one response length per completion")
        k = len(self.names)
        jobs = [
            (name, completion, label, extra or {})
            for completion, label, extra in zip(completions, labels, extras)
            for name in self.names
        ]
        outcomes = self._pool.map(jobs)

        scores = [0.0] * n
        sums = [0.0] * k
        counts = {TIMEOUT: 0, ERROR: 0}
        failures = []
        for j, outcome in enumerate(outcomes):
            sample, v = divmod(j, k)
            if outcome.status == OK:
                scores[sample] += self.weights[v] * outcome.value
                sums[v] += outcome.value
            else:
                counts[outcome.status] += 1
                failures.append(f"sample {sample} {self.names[v]}: {outcome.status} {outcome.detail}")
        if failures:
            logger.warning("%d verifier failures; first: %s", len(failures), failures[0])

        metrics = {f"rewards/{name}": sums[v] / max(n, 1) for v, name in enumerate(self.names)}
        if self.overlong is not None:
            penalties = overlong_penalty(
                response_lengths,
                self.overlong.max_response_length,
                self.overlong.overlong_buffer_len,
                self.overlong.penalty_factor,
            )
            scores = [s + p for s, p in zip(scores, penalties)]
            metrics["rewards/overlong_penalty"] = sum(penalties) / max(n, 1)
        metrics["rewards/score"] = sum(scores) / max(n, 1)
        metrics["rewards/timeouts"] = float(counts[TIMEOUT])
        metrics["rewards/errors"] = float(counts[ERROR])
        return scores, metrics

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "RuleReward":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
