"""metrics.jsonl and tensorboard after a crash and a resume: every step recorded once."""

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mindrl.trainer.tracking import Tracker


def scalars(run_dir, key):
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, round(e.value, 4)) for e in acc.Scalars(key)]


def test_rewind_drops_steps_lost_after_the_checkpoint(tmp_path):
    first = Tracker(tmp_path)
    for step in range(1, 6):                       # checkpoint at 3, crash after step 5
        first.log(step, {"critic/score/mean": step / 10})
    first._jsonl.write('{"step": 6, "critic/sco')  # a line cut short by kill -9
    first._jsonl.flush()
    first.tb.flush()

    resumed = Tracker(tmp_path)
    resumed.rewind(3)
    assert [h["step"] for h in resumed.history] == [1, 2, 3]
    for step in range(4, 7):
        resumed.log(step, {"critic/score/mean": step})
    resumed.close()

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["critic/score/mean"] for r in rows] == [0.1, 0.2, 0.3, 4, 5, 6]
    assert scalars(tmp_path, "critic/score/mean") == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 4.0),
                                                     (5, 5.0), (6, 6.0)]
    assert resumed.reward_curve().stat().st_size > 0


def test_rewind_of_a_fresh_run_keeps_nothing(tmp_path):
    tracker = Tracker(tmp_path, use_tensorboard=False)
    tracker.rewind(0)
    tracker.log(1, {"critic/score/mean": 0.5})
    tracker.close()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


class _FakeWandb:
    """Records wandb.init's arguments (wandb is optional and needs no network here)."""

    def __init__(self):
        self.init_kwargs, self.logged = None, []

    def init(self, **kwargs):
        self.init_kwargs = kwargs
        return self

    def log(self, data, step=None):
        self.logged.append((step, data))

    @staticmethod
    def Histogram(values):
        return ("histogram", tuple(values))

    def finish(self):
        pass


def test_wandb_save_dir_is_where_wandb_writes(tmp_path, monkeypatch):
    import sys

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run_dir, save_dir = tmp_path / "run", tmp_path / "wandb_files"
    run_dir.mkdir()
    Tracker(run_dir, use_tensorboard=False, use_wandb=True, wandb_dir=str(save_dir)).close()
    assert fake.init_kwargs["dir"] == str(save_dir) and save_dir.is_dir()
    Tracker(run_dir, use_tensorboard=False, use_wandb=True).close()
    assert fake.init_kwargs["dir"] == str(run_dir)   # unset: the run directory, as before


def test_distributions_become_histograms_and_stay_out_of_the_jsonl(tmp_path):
    tracker = Tracker(tmp_path)
    tracker.log(1, {"rollout/staleness_mean": 0.75},
                distributions={"rollout/staleness": [0, 1, 1, 1]})
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    (event,) = acc.Histograms("rollout/staleness")
    hist = event.histogram_value
    assert (event.step, hist.num, hist.sum, hist.min, hist.max) == (1, 4, 3.0, 0.0, 1.0)
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert row == {"step": 1, "rollout/staleness_mean": 0.75}


def test_distributions_reach_wandb_as_histograms(tmp_path, monkeypatch):
    import sys

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    tracker = Tracker(tmp_path, use_tensorboard=False, use_wandb=True)
    tracker.log(2, {"a": 1.0}, distributions={"rollout/staleness": [2, 0]})
    tracker.close()
    assert fake.logged == [(2, {"a": 1.0, "rollout/staleness": ("histogram", (2.0, 0.0))})]
