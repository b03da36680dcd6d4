"""The step's two forward-only passes (trainer/log_prob_passes.py) without Ray: blocking runs
them one after the other; otherwise both are submitted before either is waited for, and the
overlap is the seconds their workers' spans share (the end-to-end run cannot assert it is
above 0: on a loaded 2-core box one pass may start after the other ended)."""

import pytest
import torch

from mindrl.trainer.log_prob_passes import LogProbPass, run_passes


class _Group:
    """A role's worker group as run_passes uses it; records the calls in `calls`."""

    def __init__(self, name, span, calls, routes=False):
        self.name, self.span, self.calls, self.routes = name, span, calls, routes

    def _result(self):
        out = {"log_probs": torch.full((2, 3), float(len(self.name))), "span": self.span}
        if self.routes:
            out["routes"] = torch.zeros(2, 4, 1, 2, dtype=torch.int16)
        return out

    def compute_log_probs(self, batch_ref, micro_batch_size, like_update, with_routes, replay):
        self.calls.append(("compute", self.name, with_routes, replay))
        return self._result()

    def submit_log_probs(self, batch_ref, micro_batch_size, like_update, with_routes, replay):
        self.calls.append(("submit", self.name, with_routes, replay))
        return [f"{self.name} ref"]

    def wait(self, refs, verb):
        assert verb.__name__ == "compute_log_probs" and refs == [f"{self.name} ref"]
        self.calls.append(("wait", self.name))
        return [self._result()]


def _passes(calls, actor_span=(10.0, 12.5), ref_span=(11.0, 14.0)):
    return [LogProbPass("old_log_prob", "old_log_probs", _Group("actor", actor_span, calls, True),
                        4, routes_field="old_routes"),
            LogProbPass("ref", "ref_log_probs", _Group("reference", ref_span, calls), 4,
                        replay="old_routes")]


def test_both_passes_are_in_flight_before_either_is_waited_for_and_their_overlap_is_timed():
    calls, timings = [], {}
    out = run_passes(_passes(calls), "batch ref", False, timings)
    assert calls == [("submit", "actor", True, None), ("submit", "reference", False, "old_routes"),
                     ("wait", "actor"), ("wait", "reference")]
    assert timings["timing_s/log_prob_overlap"] == pytest.approx(1.5)     # 11.0 .. 12.5
    assert {"timing_s/old_log_prob", "timing_s/ref"} <= set(timings)
    assert out["old_log_probs"][0, 0] == 5 and out["ref_log_probs"][0, 0] == 9
    assert out["old_routes"].shape == (2, 4, 1, 2)          # the pass that records routes
    # passes that ran one after the other overlap 0 seconds, never less
    timings = {}
    run_passes(_passes([], (1.0, 2.0), (3.0, 4.0)), "batch ref", False, timings)
    assert timings["timing_s/log_prob_overlap"] == 0.0


def test_blocking_runs_one_pass_after_the_other_and_times_each():
    calls, timings = [], {}
    out = run_passes(_passes(calls), "batch ref", True, timings)
    assert calls == [("compute", "actor", True, None),
                     ("compute", "reference", False, "old_routes")]
    assert "timing_s/log_prob_overlap" not in timings
    assert set(out) == {"old_log_probs", "old_routes", "ref_log_probs"}
