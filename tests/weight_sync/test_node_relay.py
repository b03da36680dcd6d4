"""Who feeds which engines across nodes: the host its own node's, one actor rank per other
node the rest (one that does not send when there is one)."""

import pytest

from mindrl.errors import WeightSyncError
from mindrl.weight_sync.node_relay import plan_relay


def test_one_receiver_per_other_node_never_a_rank_that_sends():
    # 7B on two nodes of 4 in miniature: TP2 x PP2 replica 0 on node a, replica 1 on node b.
    ranks = ["a"] * 4 + ["b"] * 4
    engines = ["a", "a", "b", "b"]
    plan = plan_relay(ranks, engines, host_rank=0, active_ranks=[0, 1, 2, 3])
    assert plan.host_node == "a" and plan.local_engines == (0, 1)
    assert plan.receivers == {"b": 4} and plan.remote_engines == {"b": (2, 3)}
    assert plan.group_ranks == [4]


def test_one_node_needs_no_relay():
    plan = plan_relay(["a", "a"], ["a", "a"], host_rank=0, active_ranks=[0, 1])
    assert plan.receivers == {} and plan.local_engines == (0, 1)


def test_a_node_of_only_sending_ranks_receives_on_one_of_them():
    # 32B in miniature: replica 0's pipeline spans nodes a and c; node c's ranks all send.
    ranks = ["a", "a", "b", "b", "c", "c", "d", "d"]     # rank = tp + 2 x (dp + 2 x pp)
    plan = plan_relay(ranks, ["a", "b", "c", "d"], host_rank=0, active_ranks=[0, 1, 4, 5])
    assert plan.receivers == {"b": 2, "c": 4, "d": 6}


def test_a_node_without_actor_ranks_is_refused_naming_it():
    with pytest.raises(WeightSyncError, match=r"rollout engines \[1\] are on node b, which has "
                                              "no actor rank"):
        plan_relay(["a", "a"], ["a", "b"], host_rank=0, active_ranks=[0])
