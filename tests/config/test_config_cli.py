"""cli/train_grpo.py from a foreign working directory: plan, refusal, and exit codes."""

import subprocess

import pytest

from mindrl.config import SMOKE_RECIPE, local_cluster
from mindrl.paths import REPO_ROOT
from support.grpo_runs import _command
from support import run_env

CLI = str(REPO_ROOT / "cli" / "train_grpo.py")


def run_cli(cwd, *args, env=None):
    full_env = dict(run_env.for_a_run(), HYDRA_FULL_ERROR="0", **(env or {}))
    full_env.pop("PYTHONPATH", None)  # the CLI must find mindrl by itself
    return subprocess.run([run_env.python(), CLI, *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)


def test_dry_run_of_7b_recipe_from_another_cwd(tmp_path):
    proc = run_cli(tmp_path, "--config-name", "r1_zero_qwen25_7b", "+dry_run=true")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "plan for recipe r1_zero_qwen25_7b" in out
    assert "actor   devices 0-15" in out and "TP=4 PP=2 DP=2" in out
    assert "by tokens, <= 6144 real tokens each, packed rows" in out
    assert "warnings" in out and "num_npus" in out  # the CPU box is not the NPU cluster
    assert list(tmp_path.iterdir()) == []  # Hydra wrote nothing into the cwd


def test_bad_prompt_file_fails_before_any_worker_starts(tmp_path):
    here = local_cluster()
    if here.device_type != "cpu" or here.total_devices < 2:
        pytest.skip(f"the CPU default needs 2 CPUs as its cluster; this is {here.describe()}")
    work = tmp_path / "work"
    data = work / "data" / "arith" / "train.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2="}\n')
    for name in ("tiny-qwen2-hf", "tiny-qwen2-mcore"):
        (work / "models" / name).mkdir(parents=True)
    proc = run_cli(tmp_path, "--config-name", SMOKE_RECIPE, "prepare.tiny_model=null",
                   f"megatron_training.data_path={data}",
                   env={"MINDRL_WORK_DIR": str(work)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{data}:2" in proc.stderr and "label" in proc.stderr
    assert "Ray" not in proc.stdout  # refused before Ray (or any worker) started


def test_holdout_that_cannot_be_honoured_fails_before_anything_is_made(tmp_path):
    work = tmp_path / "work"
    proc = run_cli(tmp_path, "--config-name", SMOKE_RECIPE, "prepare.max_operand=1",
                   "prepare.holdout_pairs=2",
                   env={"MINDRL_WORK_DIR": str(work)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "prepare.holdout_pairs" in proc.stderr and "hold out at most 1" in proc.stderr
    assert not (work / "models").exists()   # no model made, no Ray started
    assert "Ray" not in proc.stdout


def test_invalid_recipe_exits_1_naming_the_key(tmp_path):
    proc = run_cli(tmp_path, "+rl_config.n_sample_per_prompt=4", "+dry_run=true")
    assert proc.returncode == 1
    assert "rl_config.n_sample_per_prompt" in proc.stderr
    assert "n_samples_per_prompt" in proc.stderr


def test_an_override_the_recipe_lacks_is_refused_with_its_fix_before_hydra(tmp_path):
    """A documented key absent from the recipe (its `+`), a misspelt one (its right name), a
    recipe that does not exist (the shipped ones): exit 1 with the key and the fix, nothing
    of Hydra's "not in struct"."""
    for args, key, fix in (
            (["rl_config.router_replay=r3"], "rl_config.router_replay",
             "write +rl_config.router_replay=VALUE"),
            (["-cn", SMOKE_RECIPE, "rl_config.kl_coeff=0"], "rl_config.kl_coeff",
             "did you mean 'kl_coef'?"),
            (["--config-name=grpo_tiny_mo"], "--config-name", "did you mean 'grpo_tiny_moe_cpu'?")):
        proc = run_cli(tmp_path, *args, "+dry_run=true")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert key in proc.stderr and fix in proc.stderr, proc.stderr
        assert "not in struct" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("plus", ["", "+"])
def test_the_async_guide_s_keys_reach_the_run_with_or_without_plus(tmp_path, plus):
    """docs/guides/async.md's keys, which every recipe declares (common/async.yaml), in both
    spellings through Hydra's own parse: one_step with a bound of 2 is refused naming
    max_staleness (both values arrived), and with its own engine device the plan says so."""
    keys = (f"{plus}rl_config.async_mode=one_step", f"{plus}generate_config.rollout_devices=1",
            "rl_config.colocate_actor_ref=true", "+dry_run=true")
    proc = run_cli(tmp_path, "-cn", SMOKE_RECIPE, *keys, f"{plus}rl_config.max_staleness=2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rl_config.max_staleness" in proc.stderr and "one_step means a bound of 1" in \
        proc.stderr, proc.stderr
    proc = run_cli(tmp_path, "-cn", SMOKE_RECIPE, *keys)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rollout devices 1 (their own: generate_config.rollout_devices)" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_test_runs_that_name_no_recipe_run_the_smoke_recipe(tmp_path):
    """tests/support/grpo_runs: a CLI run that names no recipe is the a+b= smoke run, not the
    (longer) embedded default; a named recipe is kept, once, before the overrides."""
    # (python, or python and the preload client with its socket, comes before the script)
    cmd, _ = _command(tmp_path, tmp_path / "run", ["megatron_training.train_iters=1"])
    cmd = cmd[cmd.index(CLI):]
    assert cmd[:3] == [CLI, "--config-name", SMOKE_RECIPE]
    assert cmd[3:] == [f"run_dir={tmp_path / 'run'}", "megatron_training.train_iters=1"]
    cmd, _ = _command(tmp_path, tmp_path / "run", ["--config-name", "grpo_tiny_max_cpu", "a=1"])
    cmd = cmd[cmd.index(CLI):]
    assert cmd[:3] == [CLI, "--config-name", "grpo_tiny_max_cpu"]
    assert cmd.count("--config-name") == 1 and cmd[-1] == "a=1"
