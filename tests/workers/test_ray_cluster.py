"""The cluster as Ray sees it: two nodes on one machine (ray.cluster_utils.Cluster, both with
the same IP), read by node id; validation and the plan place ranks and engines on them, refuse
what cannot fit naming each node, and Ray's placement follows the plan node for node."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from mindrl.config import ConfigError, load_recipe, make_plan
from mindrl.workers.ray_cluster import check_address, read_ray_cluster
from support import run_env

REPO = Path(__file__).resolve().parents[2]
TWO_BY_TWO = ["rl_config.actor_resource.num_cpus=2", "rl_config.reference_resource.num_cpus=2",
              "rl_config.colocate_actor_ref=false"]     # the reference's ranks on node 1


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.mark.slow
def test_nodes_are_read_by_id_head_first(two_nodes):
    cluster = read_ray_cluster(two_nodes.address)
    assert cluster.device_type == "cpu" and cluster.num_nodes == 2 and cluster.total_devices == 4
    ids = [n.node_id for n in cluster.nodes]
    assert len(set(ids)) == 2
    assert ids[0] == two_nodes.head_node.node_id
    assert [cluster.node_of(d) for d in range(5)] == [0, 0, 1, 1, 2]


@pytest.mark.slow
def test_plan_puts_each_rank_and_engine_on_a_node_and_refuses_what_cannot_fit(two_nodes):
    cluster = read_ray_cluster(two_nodes.address)
    run = load_recipe("grpo_tiny_cpu", TWO_BY_TWO, cluster=cluster)
    plan = make_plan(run, cluster)
    assert plan["roles"]["actor"]["rank_nodes"] == [0, 0]
    assert plan["roles"]["ref"]["rank_nodes"] == [1, 1]
    assert plan["rollout"]["engine_nodes"] == [0, 0]
    with pytest.raises(ConfigError) as e:
        load_recipe("grpo_tiny_cpu", ["rl_config.actor_resource.num_cpus=2",
                                      "rl_config.reference_resource.num_cpus=3",
                                      "rl_config.colocate_actor_ref=false"], cluster=cluster)
    text = str(e.value)
    assert "rl_config.reference_resource.num_cpus=3: brings the run to 5 devices but the " \
           "cluster has 4" in text
    for i, node in enumerate(cluster.nodes):       # what each node has, by id
        assert f"node {i} ({node.address}, id {node.node_id[:8]}): 2" in text
    with pytest.raises(ConfigError, match="rollout engine 0 would span devices 0-3, across "
                                          "nodes"):
        load_recipe("grpo_tiny_cpu", ["rl_config.actor_resource.num_cpus=4",
                                      "rl_config.colocate_actor_ref=true",
                                      "rl_config.reference_resource.num_cpus=4",
                                      "generate_config.infer_tensor_parallel_size=4"],
                    cluster=cluster)


@pytest.mark.slow
def test_placement_follows_the_plan_node_for_node(two_nodes):
    import ray
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from mindrl.workers.placement import create_placement

    cluster = read_ray_cluster(two_nodes.address)
    run = load_recipe("grpo_tiny_cpu", TWO_BY_TWO, cluster=cluster)
    ray.init(address=two_nodes.address, log_to_driver=False)
    try:
        slots, engines = create_placement(run, timeout_s=30)
        pg = slots["actor"].placement_group
        placed = placement_group_table(pg)["bundles_to_node_id"]
        ids = [n.node_id for n in cluster.nodes]
        assert [placed[b] for b in range(4)] == [ids[0], ids[0], ids[1], ids[1]]
        assert slots["ref"].first_bundle == 2 and [e.bundle for e in engines] == [0, 1]
        remove_placement_group(pg)
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_the_cli_plans_against_the_cluster_ray_address_names(two_nodes):
    env = {**run_env.for_a_run(), "RAY_ADDRESS": two_nodes.address}
    out = subprocess.run([run_env.python(), str(REPO / "cli" / "train_grpo.py"), "+dry_run=true",
                          *TWO_BY_TWO], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cluster: 2 node(s) x 2 cpu = 4 device(s)" in out.stdout
    assert "node of each rank: [1, 1]" in out.stdout        # the reference, on the other node


def test_an_address_that_does_not_answer_fails_fast_naming_it():
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"RAY_ADDRESS=127\.0\.0\.1:9 does not answer"):
        check_address("127.0.0.1:9")
    assert time.perf_counter() - start < 30



@pytest.mark.slow
def test_a_node_with_other_software_is_refused_naming_it(two_nodes, tmp_path):
    """A third node whose Python finds another MindRL checkout (one source file edited, same
    version number): the CLI refuses the cluster before planning, naming that node and both
    versions; the other nodes agree with the head. The node is removed again afterwards.
    (The CLI runs from a directory without a checkout: Ray puts the driver's working
    directory first on every worker's path.)"""
    import shutil

    from mindrl.workers.node_versions import software_versions

    other = tmp_path / "other_checkout"
    shutil.copytree(REPO / "mindrl", other / "mindrl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "mindrl" / "errors.py", "a") as f:
        f.write("\n# edited on this node only\n")
    node = two_nodes.add_node(num_cpus=2, env_vars={"PYTHONPATH": str(other)})
    try:
        two_nodes.wait_for_nodes()
        env = {**run_env.for_a_run(), "RAY_ADDRESS": two_nodes.address}
        out = subprocess.run([run_env.python(), str(REPO / "cli" / "train_grpo.py"),
                              "+dry_run=true"], env=env, capture_output=True, text=True,
                             timeout=300, cwd=str(tmp_path))
    finally:
        two_nodes.remove_node(node)
        two_nodes.wait_for_nodes()
    assert out.returncode == 1, (out.returncode, out.stderr[-3000:])
    head = software_versions()["mindrl"]
    text = out.stderr[out.stderr.index("cannot use the cluster"):]
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    assert len(lines) == 1, text                      # only that node, only mindrl differs
    assert lines[0].startswith(f"node {node.node_id[:12]}: mindrl 0.1.0 (sources "), text
    assert f"(head: {head})" in lines[0] and head not in lines[0].split("(head:")[0], text
