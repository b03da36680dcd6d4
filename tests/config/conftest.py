"""Fixtures for recipe tests: the cluster each shipped recipe was written for."""

import pytest

from mindrl.config import ClusterResources

RECIPE_CLUSTERS = {
    "grpo_tiny_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_vl_cpu": ClusterResources("cpu", 2),
    "r1_zero_qwen25_7b": ClusterResources("npu", 8, 2, device_memory_gib=64),
    "r1_zero_qwen25_32b": ClusterResources("npu", 8, 4, device_memory_gib=64),
    "grpo_qwen25_7b": ClusterResources("cuda", 8, 1, device_memory_gib=80),
    "grpo_qwen25vl_7b_geo3k": ClusterResources("npu", 8, 1, device_memory_gib=64),
    "grpo_qwen25vl_32b_geo3k": ClusterResources("npu", 8, 4, device_memory_gib=64),
    "grpo_qwen3_8b": ClusterResources("npu", 16, 1, device_memory_gib=64),    # one A3 node
    "dapo_qwen3_32b": ClusterResources("npu", 16, 1, device_memory_gib=64),
}


@pytest.fixture
def cpu2():
    return ClusterResources("cpu", 2)


@pytest.fixture
def cpu8():
    return ClusterResources("cpu", 8)


@pytest.fixture
def recipe_clusters():
    return dict(RECIPE_CLUSTERS)


def pytest_generate_tests(metafunc):
    """A test taking `recipe_name` runs once per shipped recipe."""
    if "recipe_name" in metafunc.fixturenames:
        metafunc.parametrize("recipe_name", sorted(RECIPE_CLUSTERS))
