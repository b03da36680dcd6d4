"""bf16 where the cluster computes in it, refused where it does not: on every machine, by
passing the cluster's capability explicitly (ClusterResources.bf16)."""

import pytest

from mindrl import device
from mindrl.config import (ClusterResources, compose_recipe, load_recipe,
                           local_cluster, validate_lenient)
from mindrl.config.checks.dtype import check_bf16
from mindrl.config.errors import CLUSTER
from support.recipe_errors import recipe_error

TINY = "grpo_tiny_cpu"
NO_BF16 = ClusterResources("cpu", 2, bf16=False)


def rejected(overrides, cluster=NO_BF16):
    return recipe_error(TINY, overrides, cluster)


def test_shared_bf16_refused_without_bf16_naming_key_roles_and_fallback():
    err = rejected(["megatron_training.bf16=true"])
    assert err.keys == ["megatron_training.bf16"], str(err)   # one problem for both roles
    text = str(err)
    for words in ("megatron_training.bf16=True", "actor and ref", "do not compute in bfloat16",
                  "no bf16", "set megatron_training.bf16: false", "fp32"):
        assert words in text, text


def test_one_role_section_is_named_as_its_own_key():
    err = rejected(["+actor_config.bf16=true"])
    assert err.keys == ["actor_config.bf16"], str(err)
    text = str(err)
    assert "puts the actor in bfloat16" in text and "ref" not in text, text
    assert "set actor_config.bf16: false: the actor then trains in fp32" in text, text


@pytest.mark.parametrize("bf16", [True, None])
def test_bf16_accepted_where_supported_or_unknown(bf16):
    run = load_recipe(TINY, ["megatron_training.bf16=true"],
                      cluster=ClusterResources("cpu", 2, bf16=bf16))
    assert {run.role(r).params_dtype for r in run.active_roles} == {"bfloat16"}


def test_fp32_recipe_runs_without_bf16():
    run = load_recipe(TINY, [], cluster=NO_BF16)
    assert {run.role(r).params_dtype for r in run.active_roles} == {"float32"}


def test_plan_mode_reports_it_as_a_cluster_warning():
    run, warnings = validate_lenient(compose_recipe(TINY, ["megatron_training.bf16=true"]),
                                     NO_BF16, check_paths=False)
    assert [(w.key, w.category) for w in warnings] == [("megatron_training.bf16", CLUSTER)]


def test_rollout_dtype_refused_on_a_gpu_without_bf16_but_not_on_cpu():
    """On CPU vLLM always runs fp32 (config/cpu_notice.py); elsewhere the recipe's dtype."""
    run = load_recipe(TINY, ["generate_config.dtype=bfloat16"],
                      cluster=ClusterResources("cpu", 2))
    old_gpu = ClusterResources("cuda", 8, bf16=False)
    assert [p.key for p in check_bf16(run, old_gpu)] == ["generate_config.dtype"]
    assert "float32" in check_bf16(run, old_gpu)[0].fix
    assert check_bf16(run, NO_BF16) == []
    assert check_bf16(run, ClusterResources("cuda", 8, bf16=True)) == []


def test_local_cluster_carries_the_devices_answer():
    here = local_cluster()
    assert here.bf16 is device.bf16_supported()
    assert isinstance(here.bf16, bool)
