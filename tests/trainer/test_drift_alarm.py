"""The log-prob drift alarm: one warning per run of K steps above the threshold, naming them;
quiet until the diff clears and recurs; off with a null threshold."""

from types import SimpleNamespace

from mindrl.trainer.drift import DRIFT_KEY, drift_warning, warn_on_drift


def _replay(diffs, threshold=0.01, steps=3, first_step=1):
    """Feed the alarm step by step as the trainer does; {step: message} of the warnings."""
    history, warnings = [], {}
    for i, diff in enumerate(diffs):
        step = first_step + i
        row = {"step": step, "critic/score/mean": 0.5}
        if diff is not None:
            row[DRIFT_KEY] = diff
        history.append(row)
        message = drift_warning(history, threshold, steps)
        if message is not None:
            warnings[step] = message
    return warnings


def test_warns_once_at_the_kth_step_and_names_the_steps():
    #        step: 1      2     3     4     5     6     7     8     9     10    11
    warnings = _replay([0.001, 0.02, 0.03, 0.01, 0.05, 0.06, 0.07, 0.08, 0.09, 0.002, 0.02])
    # step 4 sits exactly at the threshold (not above) and breaks the first run at 2 steps
    assert list(warnings) == [7]
    assert warnings[7] == ("rollout/logprob_diff_mean above 0.01 for 3 steps in a row "
                           "(steps 5-7): vLLM and the actor disagree; check dtype, the weight "
                           "sync, or enable rl_config.rollout_is")


def test_warns_again_only_after_it_clears_and_recurs():
    above, below = 0.5, 0.0
    warnings = _replay([above] * 4 + [below] + [above] * 3 + [above] * 2)
    assert list(warnings) == [3, 8]
    assert "(steps 6-8)" in warnings[8]


def test_rows_without_the_diff_are_skipped_and_a_step_gap_ends_a_run():
    # a validation-only row (no diff) between steps does not break or count
    assert list(_replay([0.5, None, 0.5, 0.5], steps=3)) == []
    history = [{"step": 1, DRIFT_KEY: 0.5}, {"step": 1}, {"step": 2, DRIFT_KEY: 0.5},
               {"step": 3, DRIFT_KEY: 0.5}]
    assert "(steps 1-3)" in drift_warning(history, 0.01, 3)
    # steps 1, 2 then 5, 6, 7 (a resumed run that lost steps 3-4): the run starts at 5
    history = [{"step": s, DRIFT_KEY: 0.5} for s in (1, 2, 5, 6, 7)]
    assert "(steps 5-7)" in drift_warning(history, 0.01, 3)
    assert drift_warning(history[:4], 0.01, 3) is None


def test_one_step_alarm_and_null_threshold():
    assert list(_replay([0.5, 0.5, 0.0, 0.5], steps=1)) == [1, 4]
    assert "for 1 step in a row (step 4)" in _replay([0.5, 0.5, 0.0, 0.5], steps=1)[4]
    assert _replay([1.0] * 5, threshold=None) == {}


def test_warn_on_drift_logs_through_the_trainers_log():
    lines = []
    rl = SimpleNamespace(logprob_drift_threshold=0.01, logprob_drift_steps=2)
    history = [{"step": 1, DRIFT_KEY: 0.3}]
    assert warn_on_drift(history, rl, lines.append) is None
    history.append({"step": 2, DRIFT_KEY: 0.4})
    message = warn_on_drift(history, rl, lines.append)
    assert lines == [f"warning: {message}"] and "(steps 1-2)" in message


def test_steps_on_stale_samples_do_not_count_and_end_a_run():
    """The asynchronous loop: a step whose samples (or some of their tokens) came from older
    weights differs from the actor by the updates since, not by a vLLM mismatch."""
    def row(step, stale=None, crossed=None):
        out = {"step": step, DRIFT_KEY: 0.5}
        if stale is not None:
            out["rollout/stale_fraction"] = stale
        if crossed is not None:
            out["rollout/crossed_update_frac"] = crossed
        return out

    one_step = [row(1, 0.0, 0.0)] + [row(s, 1.0, 0.0) for s in range(2, 8)]
    assert all(drift_warning(one_step[:n], 0.01, 3) is None for n in range(1, 8))
    # partial rollouts: a quarter of the tokens crossed an update
    assert drift_warning([row(s, 0.0, 0.25) for s in (1, 2, 3)], 0.01, 3) is None
    # on-policy steps of a bounded run count as in the synchronous loop; a stale one ends it
    fresh = [row(1, 0.0, 0.0), row(2, 0.0, 0.0), row(3, 0.5), row(4, 0.0), row(5, 0.0),
             row(6, 0.0, 0.0)]
    assert drift_warning(fresh[:3], 0.01, 3) is None
    assert "(steps 4-6)" in drift_warning(fresh, 0.01, 3)
