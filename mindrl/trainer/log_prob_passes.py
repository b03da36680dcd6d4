"""The step's forward-only passes: the actor's old log-probs and the reference's.

They read the same batch and run on different worker groups: blocking, one after the other;
otherwise both are in flight at once and `timing_s/log_prob_overlap` says for how long.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from mindrl.workers.megatron_worker import MegatronWorker


@contextmanager
def timed(timings: Dict[str, float], key: str):
    """Adds the block's seconds to timing_s/KEY (a phase may run more than once a step)."""
    start = time.perf_counter()
    yield
    key = f"timing_s/{key}"
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class LogProbPass:
    timing_key: str          # timing_s/<key>
    field: str               # the Batch field it fills
    group: object            # the role's worker group
    micro_batch_size: int
    like_update: Optional[tuple] = None   # (mini batch size, shuffle, seed) it plans like
    routes_field: Optional[str] = None    # the Batch field its recorded routes fill
    replay: Optional[str] = None          # the Batch field whose routes it replays


def run_passes(passes: List[LogProbPass], batch_ref, blocking: bool,
               timings: Dict[str, float]) -> Dict[str, torch.Tensor]:
    out: Dict[str, torch.Tensor] = {}
    if blocking:
        for p in passes:
            with timed(timings, p.timing_key):
                _take(out, p, p.group.compute_log_probs(
                    batch_ref, p.micro_batch_size, p.like_update, p.routes_field is not None,
                    p.replay))
        return out
    start = time.perf_counter()
    pending = [(p, p.group.submit_log_probs(batch_ref, p.micro_batch_size, p.like_update,
                                            p.routes_field is not None, p.replay))
               for p in passes]
    spans = []
    for p, refs in pending:
        result = p.group.wait(refs, MegatronWorker.compute_log_probs)[0]
        _take(out, p, result)
        spans.append(result["span"])
        timings[f"timing_s/{p.timing_key}"] = time.perf_counter() - start   # until it was ready
    if len(spans) == 2:   # seconds both passes were running at once
        timings["timing_s/log_prob_overlap"] = max(
            0.0, min(spans[0][1], spans[1][1]) - max(spans[0][0], spans[1][0]))
    return out


def _take(out: Dict[str, torch.Tensor], p: LogProbPass, result: dict) -> None:
    out[p.field] = result["log_probs"]
    if p.routes_field is not None and "routes" in result:
        out[p.routes_field] = result["routes"]
