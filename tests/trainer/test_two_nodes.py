"""A run across two Ray nodes (ray.cluster_utils.Cluster on one machine: two raylets, one IP),
reached through RAY_ADDRESS as a user reaches `ray start` nodes. Actor PP2 puts one pipeline
stage and one rollout engine on each node; the engine on the far node gets its weights through
that node's receiver over the collective backend (weight_sync/node_relay.py), which is also
the rank sending its stage's shards in the same sync (it receives in a thread of its own, as
on the 32B recipe's nodes), verified on every sync; the run's metrics equal a one-node run of
the same recipe."""

import os

import pytest
from grpo_runs import metrics, train

LAYOUT = ("megatron_training.train_iters=2", "rl_config.save_freq=2",
          "rl_config.actor_resource.num_cpus=2", "+actor_config.pipeline_model_parallel_size=2",
          "rl_config.colocate_actor_ref=true",
          "rl_config.reference_resource.num_cpus=2", "generate_config.verify_sync=every",
          "rl_config.val_data_path=null")
NOT_COMPARED = ("timing_s/", "perf/time_per_step", "perf/throughput", "weight_sync/relayed")


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_a_run_across_two_nodes_equals_one_node(tmp_path, two_nodes):
    from mindrl.config import load_recipe, make_plan
    from mindrl.workers.ray_cluster import read_ray_cluster

    cluster = read_ray_cluster(two_nodes.address)
    plan = make_plan(load_recipe("grpo_tiny_cpu", list(LAYOUT), cluster=cluster), cluster)
    assert plan["roles"]["actor"]["rank_nodes"] == [0, 1]
    assert plan["rollout"]["engine_nodes"] == [0, 1]

    far = tmp_path / "runs" / "two_nodes"
    train(tmp_path, far, *LAYOUT, ray_address=two_nodes.address)
    near = tmp_path / "runs" / "one_node"
    train(tmp_path, near, *LAYOUT)                 # a private one-node cluster, same recipe
    got, want = metrics(far), metrics(near)
    assert [r["step"] for r in got] == [1, 2]
    for a, b in zip(got, want):
        # The far engine's bucket crossed once per sync (the tiny model in fp32: ~1.25 MB).
        assert a["weight_sync/relayed_bytes"] > 1e6 and b["weight_sync/relayed_bytes"] == 0
        assert a["weight_sync/verified"] == 1.0
        kept = [k for k in a if not k.startswith(NOT_COMPARED)]
        assert {k: a[k] for k in kept} == {k: b[k] for k in kept}
