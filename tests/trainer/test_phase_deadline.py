"""A phase that passes rl_config.phase_timeout_s stops the run soon after, with exit code 4 and
one report naming the phase, the step, the member that did not answer with its node, and every
live worker's Python stack; a node lost mid-run stops it with exit code 3 and a report naming
what ran there; the checkpoint written before stays complete. A placement that cannot fit is
refused before anything starts."""

import contextlib
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from support.grpo_runs import shm_files_of, start

from mindrl.processes import pid_alive

# By themselves (tests/conftest.py): a 20 s deadline is timed on a quiet machine, and a killed
# receiver's /dev/shm file must outlive it until this file's own sweep.
pytestmark = pytest.mark.alone

HOOK = Path(__file__).resolve().parents[1] / "support" / "hang_in_update"
DEADLINE_S = 20
# Two actor ranks (TP2, so rank 0 waits in a collective for the hung rank 1), no reference.
LAYOUT = ("+actor_config.tensor_model_parallel_size=2", "rl_config.actor_resource.num_cpus=2",
          "rl_config.kl_coef=0", "~rl_config.reference_resource")
QUICK = ("rl_config.dynamic_sampling=false", "rl_config.val_before_train=false",
         "rl_config.val_freq=null")


@contextlib.contextmanager
def _output_of(proc):
    """The run's stdout and stderr, read in threads while the block runs and complete after
    it; the run is killed at the end if it still goes."""
    out = {}
    readers = [threading.Thread(target=lambda n=n: out.__setitem__(n, getattr(proc, n).read()))
               for n in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    try:
        yield out
    finally:
        if proc.poll() is None:
            proc.kill()
        for reader in readers:
            reader.join()


def _wait_for_first_checkpoint(proc, run_dir: Path) -> Path:
    """latest_checkpointed_iteration.txt, once it exists (or the run ended, or 400 s)."""
    saved = run_dir / "latest_checkpointed_iteration.txt"
    deadline = time.time() + 400
    while proc.poll() is None and not saved.exists() and time.time() < deadline:
        time.sleep(0.2)
    return saved


def _section(report: str, title: str) -> str:
    """The text under the `===== stack of TITLE...` header, up to the next header."""
    start = report.index(f"===== stack of {title}")
    end = report.find("\n=====", start + 1)
    return report[start:end if end > 0 else None]


@pytest.mark.slow
def test_a_rank_that_hangs_in_the_update_stops_the_run_with_a_report_naming_it(work, tmp_path):
    run_dir = tmp_path / "runs" / "hangs"
    path = os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")]))
    proc = start(work, run_dir, "megatron_training.train_iters=3", "rl_config.save_freq=1",
                 f"rl_config.phase_timeout_s={DEADLINE_S}", *LAYOUT, *QUICK,
                 env={"PYTHONPATH": path, "MINDRL_TEST_HANG_UPDATE": "actor:1:2"})
    with _output_of(proc) as out:
        saved = _wait_for_first_checkpoint(proc, run_dir)
        saved_at = time.time()     # step 1 saved: step 2 generates, then its update hangs
        proc.wait(timeout=DEADLINE_S + 120)
        stopped_after = time.time() - saved_at
    err = out["stderr"]
    assert proc.returncode == 4, err[-3000:]
    assert stopped_after < DEADLINE_S + 60, stopped_after   # step 2's generate included
    assert "actor rank 0, actor rank 1: no answer to update within 20 s" in err

    report = (run_dir / "failure_report.txt").read_text()
    pids = json.loads((run_dir / "workers.json").read_text())
    assert "phase: update\nstep: 2\ndeadline: 20 s" in report
    assert "cause: timeout" in report
    late = report.split("did not answer:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # Rank 0 does not answer either: it waits for rank 1 in a TP collective (its stack says).
    assert [line.split(":")[0] for line in late] == ["  actor rank 0", "  actor rank 1"], late
    assert re.fullmatch(rf"  actor rank 1: pid {pids['actor'][1]}, node [0-9a-f]{{56}} "
                        rf"\(\d+\.\d+\.\d+\.\d+\); at hang_in_update_for_the_test "
                        rf"\(sitecustomize.py:\d+\)", late[1]), late
    assert "; at " in late[0]                 # where rank 0 waits (a collective)
    hung = _section(report, "actor rank 1")
    assert "hang_in_update_for_the_test" in hung and "sitecustomize.py" in hung, hung
    assert "megatron_worker.py" in _section(report, "actor rank 0")
    for index in range(len(pids["rollout"])):   # every live worker's stack, engines too
        assert 'File "' in _section(report, f"rollout engine {index}")
    assert f"failure report with every live worker's Python stack: {run_dir}" in out["stdout"]

    assert saved.read_text() == "1"             # the checkpoint before the hang is complete
    assert (run_dir / "iter_0000001" / "metadata.json").is_file()
    gone_by = time.time() + 30                  # the stuck rank was killed, not awaited
    while any(map(pid_alive, pids["actor"])) and time.time() < gone_by:
        time.sleep(0.5)
    assert not any(map(pid_alive, pids["actor"]))


def test_a_placement_that_cannot_fit_is_refused_before_anything_starts(tmp_path):
    """Two actor devices and the reference's one on this 2-CPU cluster: exit 1 naming the key
    and what the cluster has, before a model is made, Ray starts or a run directory exists."""
    run_dir = tmp_path / "runs" / "too_big"
    proc = start(tmp_path, run_dir, "rl_config.actor_resource.num_cpus=2",
                 "rl_config.colocate_actor_ref=false")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    assert "rl_config.reference_resource.num_cpus=1: brings the run to 3 devices but the " \
           "cluster has 2" in err, err
    assert "Ray" not in out and not run_dir.exists() and not (tmp_path / "models").exists()


@pytest.fixture(scope="module")
def two_nodes():
    """Two Ray nodes of one CPU each on this machine (two raylets, one IP), stopped after."""
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                            "include_dashboard": False})
    far = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster, far
    cluster.shutdown()


@pytest.mark.slow
def test_the_stack_of_a_process_on_another_node_is_read_there(two_nodes):
    """The failure report's collection path for another node: a task pinned to that node
    signals the process and reads its dump back."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from mindrl.trainer.launch import WORKER_SETUP
    from mindrl.workers.stack_dump import collect

    cluster, far = two_nodes
    ray.init(address=cluster.address, runtime_env=WORKER_SETUP, log_to_driver=False)
    try:
        @ray.remote(num_cpus=0)
        class Sleeper:
            def pid(self):
                return os.getpid()

            def sleep_in_a_named_function(self):
                time.sleep(30)

        sleeper = Sleeper.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            far.node_id, soft=False)).remote()
        pid = ray.get(sleeper.pid.remote())
        sleeper.sleep_in_a_named_function.remote()
        time.sleep(1)
        assert ray.get_runtime_context().get_node_id() != far.node_id
        stacks = collect([{"who": "sleeper", "pid": pid, "node": far.node_id}])
        assert "in sleep_in_a_named_function" in stacks[pid], stacks
        ray.kill(sleeper)
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_a_node_lost_mid_run_stops_the_run_with_a_report_naming_it(work, tmp_path, two_nodes):
    """Actor rank 1 and rollout engine 1 run on the second node (the plan's layout); that node
    goes (its raylet and workers killed) after step 1's checkpoint: exit 3 within 60 s, the
    report names both with that node's id. The killed receiver's /dev/shm file outlives it
    until the sweep every run makes at start (its actor ranks and engines) takes it."""
    from mindrl.shared_memory import RELAY, shm_path, sweep_stale

    cluster, far = two_nodes
    run_dir = tmp_path / "runs" / "node_lost"
    proc = start(work, run_dir, "megatron_training.train_iters=4", "rl_config.save_freq=1",
                 *LAYOUT, *QUICK, env={"RAY_ADDRESS": cluster.address})
    with _output_of(proc) as out:
        saved = _wait_for_first_checkpoint(proc, run_dir)
        assert proc.poll() is None
        cluster.remove_node(far, allow_graceful=False)
        removed_at = time.time()
        proc.wait(timeout=120)
        stopped_after = time.time() - removed_at
    assert proc.returncode == 3, out["stderr"][-3000:]
    assert stopped_after < 60, stopped_after
    report = (run_dir / "failure_report.txt").read_text()
    pids = json.loads((run_dir / "workers.json").read_text())
    assert "cause: death" in report, report[:3000]
    died = report.split("died:\n", 1)[1].split("\n\n", 1)[0]
    for who, pid in (("actor rank 1", pids["actor"][1]),
                     ("rollout engine 1 (actor device 1)", pids["rollout"][1])):
        assert f"  {who}: pid {pid}, node {far.node_id} (" in died, report[:3000]
    assert 'File "' in _section(report, "actor rank 0")        # the live rank's stack
    assert (run_dir / f"iter_{int(saved.read_text()):07d}" / "metadata.json").is_file()
    receiver = pids["actor"][1]          # the far node's receiver (TP rank 1 there)
    gone_by = time.time() + 30
    while pid_alive(receiver) and time.time() < gone_by:
        time.sleep(0.5)
    assert not pid_alive(receiver)
    assert shm_files_of(run_dir) == [shm_path(RELAY, receiver)]   # no finalizer ran
    sweep_stale()                        # what the next run does first, on each node
    assert shm_files_of(run_dir) == []


@pytest.mark.parametrize("value", [0, -5])
def test_phase_timeout_must_be_positive_and_defaults_to_a_generous_deadline(value):
    from mindrl.config import ClusterResources, ConfigError, load_recipe

    cpu2 = ClusterResources("cpu", 2)
    assert load_recipe("grpo_tiny_cpu", [], cluster=cpu2).rl_config.phase_timeout_s == 1800
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_cpu", [f"rl_config.phase_timeout_s={value}"], cluster=cpu2)
    assert "rl_config.phase_timeout_s" in e.value.keys and "must be positive" in str(e.value)
