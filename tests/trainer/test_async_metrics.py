"""Asynchronous GRPO's per-step metrics (trainer/async_metrics.py), by hand."""

import pytest
import torch

from mindrl.trainer.async_metrics import covered, staleness_metrics, timeline_metrics


def test_staleness_counts_versions_behind_the_update_s_weights():
    # the update starts from version 4: samples from versions 4, 3, 3, 2
    out = staleness_metrics(torch.tensor([4, 3, 3, 2]), 4)
    assert out == {"rollout/staleness_mean": 1.0, "rollout/staleness_max": 2.0,
                   "rollout/stale_fraction": 0.75}
    assert staleness_metrics(torch.tensor([6, 6]), 6)["rollout/stale_fraction"] == 0.0


def test_covered_is_the_union_inside_the_window():
    assert covered([(0, 2), (1, 3), (5, 6), (9, 12)], (1, 10)) == pytest.approx(2 + 1 + 1)
    assert covered([], (0, 5)) == 0.0
    assert covered([(2, 3), (0, 1)], (0, 5)) == 2.0      # any order


def test_timeline_overlap_and_idle_time():
    # window 0..10; generation 0..4 and 6..7; training 3..8
    out = timeline_metrics([(0, 4), (6, 7)], (3, 8), (0, 10), actor_wait_s=1.5)
    assert out == pytest.approx({"async/overlap_fraction": 2 / 5,    # 3..4 and 6..7
                                 "async/engine_idle_s": 10 - 5,
                                 "async/actor_wait_s": 1.5})
    # the synchronous order: generation before training, no overlap
    assert timeline_metrics([(0, 3)], (3, 8), (0, 10), 3.0)["async/overlap_fraction"] == 0.0
