"""Reading a train_grpo.py command line before Hydra (config/cli_args.py): the recipe it names
in each of Hydra's spellings, its overrides without Hydra's own settings, and None (left to
Hydra) for any other flag."""

import pytest

from mindrl.config.cli_args import recipe_and_overrides

DEFAULT = "grpo_tiny_max_cpu"


@pytest.mark.parametrize("argv", [["--config-name", "r1"], ["--config-name=r1"], ["-cn", "r1"],
                                  ["-cn=r1"]])
def test_every_spelling_of_the_recipe_flag(argv):
    assert recipe_and_overrides([*argv, "a.b=1"], DEFAULT) == ("r1", ["a.b=1"])


def test_overrides_keep_their_prefixes_and_order_and_hydra_s_own_are_dropped():
    argv = ["rl_config.kl_coef=0", "+dry_run=true", "hydra.run.dir=/x", "~rl_config.x",
            "++hydra.job.chdir=false", "++a=2", "hydra/launcher=basic"]
    assert recipe_and_overrides(argv, DEFAULT) == (
        DEFAULT, ["rl_config.kl_coef=0", "+dry_run=true", "~rl_config.x", "++a=2"])


@pytest.mark.parametrize("argv", [["--help"], ["--cfg", "job"], ["-m", "a=1,2"],
                                  ["--config-path", "/x"], ["-cd", "/x"], ["--config-name"]])
def test_other_hydra_flags_are_left_to_hydra(argv):
    assert recipe_and_overrides(argv, DEFAULT) is None


def test_overrides_hydra_is_to_read_replace_their_originals_in_place():
    """The CLI hands Hydra argv with each override as compose took it (a `+` on a key the
    recipe holds as `++`); flags and Hydra's own settings stay where they were."""
    from mindrl.config.cli_args import with_overrides

    argv = ["-cn", "r1", "+rl_config.max_staleness=2", "hydra.run.dir=/x", "a.b=1"]
    name, given = recipe_and_overrides(argv, DEFAULT)
    taken = ["++rl_config.max_staleness=2", "a.b=1"]
    assert with_overrides(argv, given, taken) == [
        "-cn", "r1", "++rl_config.max_staleness=2", "hydra.run.dir=/x", "a.b=1"]
    assert with_overrides(argv, given, given) == argv
