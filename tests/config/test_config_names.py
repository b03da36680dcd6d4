"""Names a recipe picks pieces by: validation reads the verifier registry itself, and the
algorithm tables config keeps (it may not import torch) equal the real registries."""

import subprocess
import sys

import pytest

from mindrl.config import ClusterResources, ConfigError, load_recipe, names
from mindrl.rewards.registry import VERIFIERS, register_verifier

TINY = "grpo_tiny_cpu"
CPU2 = ClusterResources("cpu", 2)


def test_a_registered_verifier_validates_with_no_second_edit():
    override = ["rl_config.verifier_function=[test_names_exact]"]
    with pytest.raises(ConfigError, match=r"rl_config.verifier_function\[0\]"):
        load_recipe(TINY, override, cluster=CPU2)   # not registered yet

    @register_verifier("test_names_exact")      # the guide's way (docs/guides/add-a-verifier.md)
    def exact(completion: str, label: str, **extra) -> float:
        return float(completion.strip() == label)

    try:
        run = load_recipe(TINY, override, cluster=CPU2)
        assert run.rl_config.verifier_function == ["test_names_exact"]
    finally:
        VERIFIERS.pop("test_names_exact", None)


def test_a_verifier_in_a_file_of_your_own_validates_and_a_missing_file_is_named(tmp_path):
    path = tmp_path / "my_checks.py"
    path.write_text("from mindrl.rewards import register_verifier\n\n"
                    "@register_verifier('test_names_from_file')\n"
                    "def check(completion, label, **extra):\n"
                    "    return float(completion == label)\n")
    override = ["rl_config.verifier_function=[test_names_from_file]"]
    try:
        run = load_recipe(TINY, [*override, f"+rl_config.verifier_modules=[{path}]"],
                          cluster=CPU2)
        assert run.rl_config.verifier_modules == [str(path)]
    finally:
        VERIFIERS.pop("test_names_from_file", None)
    with pytest.raises(ConfigError) as info:
        load_recipe(TINY, [*override, f"+rl_config.verifier_modules=[{tmp_path}/absent.py]"],
                    cluster=CPU2)
    text = str(info.value)
    assert "rl_config.verifier_modules[0]" in text and "no file" in text
    assert "rl_config.verifier_function[0]" in text and "verifier_modules" in text


def test_unknown_verifier_says_how_to_register():
    with pytest.raises(ConfigError) as info:
        load_recipe(TINY, ["rl_config.verifier_function=[aritm]"], cluster=CPU2)
    assert "did you mean 'arith'" in str(info.value)
    assert "register_verifier" in str(info.value)


def test_known_verifiers_are_the_registry():
    assert set(names.known_verifiers()) == set(VERIFIERS)
    assert {"base_acc", "acc", "strict_format", "format", "boxed_acc", "boxed_format",
            "countdown", "arith"} <= set(VERIFIERS)


def test_easyr1_math_reward_validates_as_two_verifiers():
    """The VL recipe's two lines: EasyR1's 0.9 x accuracy + 0.1 x format."""
    run = load_recipe(TINY, ["rl_config.verifier_function=[boxed_acc,boxed_format]",
                             "rl_config.verifier_weight=[0.9,0.1]"], cluster=CPU2)
    assert run.rl_config.verifier_function == ["boxed_acc", "boxed_format"]
    assert run.rl_config.verifier_weight == [0.9, 0.1]


def test_validation_does_not_import_torch():
    """Reading the verifier registry keeps plan mode light (no torch, no vllm)."""
    code = ("import sys; from mindrl.config import load_recipe, ClusterResources; "
            "load_recipe('grpo_tiny_cpu', cluster=ClusterResources('cpu', 2)); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_algorithm_tables_equal_the_registries():
    from mindrl.algorithms import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATORS

    assert set(names.ADV_ESTIMATORS) == set(ADVANTAGE_ESTIMATORS)
    assert set(names.LOSS_AGG_MODES) == set(LOSS_AGGREGATORS)
    # the registry adds the k1/k2/k3 aliases; the recipe key takes the descriptive names
    assert set(names.KL_PENALTIES) == set(KL_ESTIMATORS) - {"k1", "k2", "k3"}
