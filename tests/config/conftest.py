"""Fixtures for recipe tests: the cluster each shipped recipe was written for."""

import pytest

from mindrl.config import ClusterResources

RECIPE_CLUSTERS = {
    "grpo_tiny_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_max_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_lora_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_vl_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_moe_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_agent_cpu": ClusterResources("cpu", 2),
    "grpo_tiny_agent_copy_cpu": ClusterResources("cpu", 2),
    "distill_tiny_cpu": ClusterResources("cpu", 2),
    "r1_zero_qwen25_7b": ClusterResources("npu", 8, 2, device_memory_gib=64),
    "r1_zero_qwen25_32b": ClusterResources("npu", 8, 4, device_memory_gib=64),
    "grpo_qwen25_7b": ClusterResources("cuda", 8, 1, device_memory_gib=80),
    "grpo_qwen25vl_7b_geo3k": ClusterResources("npu", 8, 1, device_memory_gib=64),
    "grpo_qwen25vl_32b_geo3k": ClusterResources("npu", 8, 4, device_memory_gib=64),
    "grpo_qwen3_8b": ClusterResources("npu", 16, 1, device_memory_gib=64),    # one A3 node
    "dapo_qwen3_32b": ClusterResources("npu", 16, 1, device_memory_gib=64),
    "dapo_qwen3_30b_a3b": ClusterResources("npu", 16, 1, device_memory_gib=64),
    "grpo_qwen3_235b_a22b": ClusterResources("npu", 128, 8, device_memory_gib=64),   # 8 A2
    "retool_qwen25_7b": ClusterResources("npu", 8, 1, device_memory_gib=64),
    "retool_qwen3_8b": ClusterResources("npu", 16, 1, device_memory_gib=64),   # one A3 node
    "search_r1_qwen25_7b": ClusterResources("npu", 8, 1, device_memory_gib=64),
    "opd_qwen3_8b_to_1p7b": ClusterResources("npu", 16, 1, device_memory_gib=64),   # one A3
    "opd_qwen3_32b_to_1p7b": ClusterResources("npu", 16, 1, device_memory_gib=64),
}
# Shipped recipes whose layout the plan refuses up front until an issue lands (their refusal
# is tested where they are: tests/config/test_moe_recipe_keys.py).
REFUSED_UNTIL = {"dapo_qwen3_30b_a3b": "vLLM expert parallelism (EP8) is not wired",
                 "grpo_qwen3_235b_a22b": "vLLM expert parallelism (EP8) is not wired"}


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
    """A test taking `recipe_name` runs once per shipped recipe that validates today."""
    if "recipe_name" in metafunc.fixturenames:
        metafunc.parametrize("recipe_name", sorted(set(RECIPE_CLUSTERS) - set(REFUSED_UNTIL)))
