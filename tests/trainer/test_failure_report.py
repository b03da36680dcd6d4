"""The failure report names each member an error names once, located: also when the error
names a rollout engine by its short label (the weight fan-out knows engines by index), which
once left the dead engine listed twice, once as "pid ?, node unknown"."""

from mindrl.errors import EngineDied
from mindrl.trainer.failure_report import member_named, write_failure_report

NODE = "ab" * 28
MEMBERS = [{"who": "actor rank 0", "pid": 11, "node": NODE},
           {"who": "rollout engine 0 (actor device 0)", "pid": 12, "node": NODE},
           {"who": "rollout engine 1 (actor device 1)", "pid": 13, "node": NODE},
           {"who": "rollout engine 10 (actor device 10)", "pid": 14, "node": NODE}]


def test_a_short_label_finds_its_member_and_only_it():
    assert member_named("rollout engine 1", MEMBERS)["pid"] == 13
    assert member_named("rollout engine 10", MEMBERS)["pid"] == 14    # not engine 1's
    assert member_named("actor rank 0", MEMBERS)["pid"] == 11
    assert member_named("rollout engine 7", MEMBERS) == {"who": "rollout engine 7",
                                                        "pid": None, "node": None}


def test_an_engine_dead_in_the_weight_sync_is_named_once_with_its_pid(tmp_path, monkeypatch):
    from mindrl.trainer import failure_report
    from mindrl.workers import stack_dump

    # The stacks as collect() reads them on a run's nodes (Ray there): engine 0's pid is gone.
    stacks = {m["pid"]: 'Current thread 0x1:\n  File "x.py", line 1 in f\n' for m in MEMBERS}
    stacks[12] = stack_dump.GONE
    monkeypatch.setattr(stack_dump, "collect", lambda members: stacks)
    monkeypatch.setattr(failure_report, "_node_addresses", lambda: {NODE: "192.0.2.2"})
    error = EngineDied("rollout engine 0 died during load_weights: gone", "load_weights",
                       ["rollout engine 0"])
    path = write_failure_report(error, MEMBERS, 3, 60, tmp_path, log=lambda _: None)
    died = path.read_text().split("died:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert died == [f"  rollout engine 0 (actor device 0): pid 12, node {NODE} (192.0.2.2)"]
