"""The run's lifecycle around any loop (trainer/lifecycle.py), over stand-in parts: a fresh run
syncs at version 0 and saves when due (keeping rl_config.save_limit checkpoints); a resumed run
restores the loader, syncs at the resumed step and runs only the steps after it; a dead member
leaves a failure report naming the step under way and ends every member at once; any other way
out ends them gracefully. Also the policy-version metrics and a submitted generate's merge."""

from pathlib import Path

import pytest
import torch

from mindrl.config import ClusterResources, load_recipe
from mindrl.data.batch import Batch
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.errors import EngineDied, WeightSyncError
from mindrl.rollout.engine_group import RolloutHandle
from mindrl.trainer import lifecycle as lifecycle_module
from mindrl.trainer.lifecycle import RunLifecycle
from mindrl.trainer.metrics import policy_version_metrics
from mindrl.trainer.resume import ResumeParts, ResumePlan


class Member:
    def __init__(self, calls, name):
        self.calls, self.name, self.engines = calls, name, ["engine"]

    def shutdown(self, graceful=True):
        self.calls.append((self.name, "shutdown", graceful))


class Actor(Member):
    def save_checkpoint(self, save_dir, step, extra, save_optim, save_rng):
        (Path(save_dir) / f"iter_{step:07d}").mkdir()
        self.calls.append(("actor", "save", step, extra["loader"], save_optim, save_rng))

    def load_checkpoint(self, ckpt_dir, optimizer, rng):
        self.calls.append(("actor", "load", ckpt_dir, optimizer, rng))
        return {"extra": {"loader": {"position": 32}}}


class Loader:
    def __init__(self, calls):
        self.calls, self.position = calls, 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.calls.append(("loader", "load", state))
        self.position = state["position"]


class Tracker:
    def __init__(self, calls):
        self.calls, self.history = calls, []

    def rewind(self, step):
        self.calls.append(("tracker", "rewind", step))

    def log(self, step, metrics, distributions=None):
        self.history.append({"step": step, **metrics})

    def reward_curve(self):
        return None

    def close(self):
        self.calls.append(("tracker", "close"))


class Parts:
    """What RunLifecycle reads of trainer/assemble.RunParts."""

    def __init__(self, tmp_path, resume_plan=None):
        self.calls = []
        self.actor, self.rollout = Actor(self.calls, "actor"), Member(self.calls, "rollout")
        self.groups = {"actor": self.actor, "ref": Member(self.calls, "ref")}
        self.loader, self.tracker = Loader(self.calls), Tracker(self.calls)
        self.reward, self.agent = None, None
        self.save_dir, self.resume_plan = tmp_path, resume_plan

    def sync_weights(self, version, **kwargs):
        self.calls.append(("sync", version))
        return {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_recipe("grpo_tiny_cpu", [f"run_dir={tmp_path_factory.mktemp('run')}",
                                         "megatron_training.train_iters=5",
                                         "rl_config.save_freq=2", "rl_config.save_limit=2",
                                         "generate_config.verify_sync=off"],
                       cluster=ClusterResources("cpu", 2))


def _loop(life, parts, fail_at=None, error=None):
    with life:
        start = life.begin()
        for step in life.steps(start):
            parts.loader.position += 16
            if step == fail_at:
                raise error
            life.step_done(step, {"critic/score/mean": float(step)})
        return life.finish()


def test_a_fresh_run_syncs_at_version_0_saves_when_due_and_shuts_down_gracefully(run, tmp_path):
    parts = Parts(tmp_path)
    history = _loop(RunLifecycle(run, parts, log=lambda line: None), parts)
    assert [row["step"] for row in history] == [1, 2, 3, 4, 5]
    calls = parts.calls
    assert calls[:2] == [("tracker", "rewind", 0), ("sync", 0)]
    saves = [c for c in calls if c[1:2] == ("save",)]
    # every second step and the last; the loader's position after each
    assert [(c[2], c[3]) for c in saves] == [(2, {"position": 32}), (4, {"position": 64}),
                                             (5, {"position": 80})]
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_0000004", "iter_0000005"]
    assert [c for c in calls if c[1:2] == ("shutdown",)] == [
        ("actor", "shutdown", True), ("ref", "shutdown", True), ("rollout", "shutdown", True)]


def test_a_resumed_run_restores_the_loader_and_runs_the_steps_after_it(run, tmp_path):
    plan = ResumePlan(4, tmp_path / "iter_0000004", ResumeParts(optimizer=True, rng=False))
    parts = Parts(tmp_path, plan)
    lines = []
    history = _loop(RunLifecycle(run, parts, log=lines.append), parts)
    assert [row["step"] for row in history] == [5]
    assert parts.calls[:4] == [("actor", "load", str(tmp_path / "iter_0000004"), True, False),
                               ("loader", "load", {"position": 32}),
                               ("tracker", "rewind", 4), ("sync", 4)]
    assert lines[0].startswith(f"resumed from {tmp_path / 'iter_0000004'} (step 4): ")


def test_a_dead_member_is_reported_at_its_step_and_every_member_ended_at_once(
        run, tmp_path, monkeypatch):
    reports = []
    monkeypatch.setattr(lifecycle_module, "report_failure",
                        lambda e, members, step, *rest: reports.append((e, len(members), step)))
    parts = Parts(tmp_path)
    died = EngineDied("rollout engine 0 (actor device 0) died during generate", "generate",
                      ["rollout engine 0 (actor device 0)"])
    with pytest.raises(EngineDied):
        _loop(RunLifecycle(run, parts, log=lambda line: None), parts, fail_at=3, error=died)
    assert reports == [(died, 3, 3)]     # actor, ref and the rollout group; step 3 under way
    assert {c[2] for c in parts.calls if c[1:2] == ("shutdown",)} == {False}
    # Any other error is no member's death: no report, a graceful shutdown.
    parts, reports[:] = Parts(tmp_path), []
    with pytest.raises(WeightSyncError):
        _loop(RunLifecycle(run, parts, log=lambda line: None), parts, fail_at=1,
              error=WeightSyncError("mismatch"))
    assert reports == []
    assert {c[2] for c in parts.calls if c[1:2] == ("shutdown",)} == {True}


def test_policy_version_metrics_count_the_oldest_sample_s_versions_behind():
    batch = Batch.of(policy_version=torch.tensor([3, 3, 1, 2]))
    assert policy_version_metrics(batch, 3) == {"rollout/policy_version": 1.0,
                                                "rollout/staleness": 2.0}
    # The synchronous loop: step s generates from and updates the weights of s - 1.
    assert policy_version_metrics(Batch.of(policy_version=torch.tensor([6, 6])), 6) == {
        "rollout/policy_version": 6.0, "rollout/staleness": 0.0}


class Group:
    """A RolloutGroup's side of a handle: the engines' answers by index."""

    phase_timeout_s = None

    def __init__(self, outputs):
        self.outputs, self.waits = outputs, 0

    def _wait(self, refs, what, timeout_s, since):
        self.waits += 1
        return {i: self.outputs[i] for i in refs.values()}


def _output(prompts, n, token):
    rows = [p for p in prompts for _ in range(n)]
    return RolloutOutput(rows, [[token]] * len(rows), [[-0.5]] * len(rows),
                         ["stop"] * len(rows), [i for i in range(len(prompts)) for _ in range(n)])


def test_a_handle_merges_its_engines_answers_in_prompt_order_with_its_policy_version():
    """Two engines' parts merge back in prompt order; every sample carries the version the
    engines held at submission; a second wait gives the same batch without waiting again."""
    batch = Batch.from_prompts([[1], [2], [3]], 2, pad_id=0)
    parts = batch.split_groups(2)
    group = Group({0: _output(parts[0].prompts(), 2, 7), 1: _output(parts[1].prompts(), 2, 8)})
    handle = RolloutHandle(group, parts, {"ref-b": 1, "ref-a": 0}, 2, policy_version=5,
                           submitted=0.0)
    out = handle.wait()
    assert out["group_id"].tolist() == [0, 0, 1, 1, 2, 2]
    assert out["response_ids"][:, 0].tolist() == [7] * len(parts[0]) + [8] * len(parts[1])
    assert out["policy_version"].tolist() == [5] * 6
    assert handle.result() is out and group.waits == 1
