"""A checkpoint's recipe vs the resuming run's, and the layout decisions made before a load:
pure functions, no processes."""

import json

import pytest

from mindrl.ckpt.training.checkpoint_recipe import (RECIPE_FILE, read_recipe, recipe_changes,
                                                    resume_messages, run_recipe, write_recipe)
from mindrl.ckpt.training.layout_change import plan_load
from mindrl.config import ClusterResources, load_recipe

SAVED = {"global_batch_size": 16, "mini_batch_size": 16, "n_samples_per_prompt": 8,
         "micro_batch_size": 2, "params_dtype": "float32",
         "model": {"num_layers": 2, "hidden_size": 64, "vocab_size": 128},
         "layout": {"tp": 2, "pp": 1, "dp": 1}, "optimizer_format": "fully_reshardable"}


def _with(**changes):
    out = json.loads(json.dumps(SAVED))
    for dotted, value in changes.items():
        node = out
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return out


def test_changes_name_nested_keys_old_to_new_and_ignore_keys_one_side_lacks():
    current = _with(mini_batch_size=8, model__hidden_size=128)
    current.pop("optimizer_format")
    assert recipe_changes(SAVED, current) == {"mini_batch_size": (16, 8),
                                             "model.hidden_size": (64, 128)}
    assert recipe_changes(SAVED, SAVED) == {}


def test_a_changed_recipe_warns_naming_every_key():
    current = _with(global_batch_size=32, n_samples_per_prompt=4, model__num_layers=4)
    (line,) = resume_messages(SAVED, current, "run/iter_0000002")
    assert line.startswith("WARNING: resuming run/iter_0000002 with a changed recipe")
    for text in ("global_batch_size: 16 -> 32", "n_samples_per_prompt: 8 -> 4",
                 "model.num_layers: 2 -> 4"):
        assert text in line


def test_a_layout_change_alone_is_a_note_not_a_warning():
    (line,) = resume_messages(SAVED, _with(layout__tp=1, layout__dp=2), "c")
    assert line == "resharding c: saved at TP2 PP1 DP1, loading at TP1 PP1 DP2"
    assert resume_messages(None, SAVED, "c") == []       # older checkpoints record none


def test_a_changed_staleness_bound_is_explained_not_warned():
    saved = dict(SAVED, max_staleness=1)
    (line,) = resume_messages(saved, dict(SAVED, max_staleness=2), "run/iter_0000004")
    assert line.startswith("run/iter_0000004 was trained with staleness bound 1, resuming "
                           "with 2 (rl_config.async_mode / max_staleness)")
    assert "generated again" in line and "WARNING" not in line
    # With another change, both are said; a checkpoint from before the bound was recorded
    # (no key) says nothing about it.
    lines = resume_messages(saved, dict(SAVED, max_staleness=0, mini_batch_size=8), "c")
    assert len(lines) == 2 and "bound 1, resuming with 0" in lines[0]
    assert lines[1].startswith("WARNING") and "max_staleness" not in lines[1]
    assert resume_messages(SAVED, dict(SAVED, max_staleness=2), "c") == []


def test_recipe_file_round_trip_and_unreadable_file_names_itself(tmp_path):
    write_recipe(tmp_path, SAVED)
    assert read_recipe(tmp_path) == SAVED
    assert read_recipe(tmp_path / "nowhere") is None
    (tmp_path / RECIPE_FILE).write_text("{")
    with pytest.raises(ValueError, match=rf"{RECIPE_FILE} is unreadable"):
        read_recipe(tmp_path)


def test_run_recipe_holds_the_trainer_keys_of_a_shipped_recipe():
    cluster = ClusterResources("cpu", 2)
    recipe = run_recipe(load_recipe("grpo_tiny_cpu", cluster=cluster))
    assert {"global_batch_size", "mini_batch_size", "n_samples_per_prompt", "micro_batch_size",
            "params_dtype"} <= recipe.keys()
    assert recipe["max_staleness"] == 0                  # synchronous
    one_step = load_recipe("grpo_tiny_cpu", ["+rl_config.async_mode=one_step",
                                             "+generate_config.rollout_devices=1",
                                             "rl_config.colocate_actor_ref=true"],
                           cluster=cluster)
    assert run_recipe(one_step)["max_staleness"] == 1
    assert set(recipe["layout"]) == {"tp", "pp", "dp"} and recipe["model"]["num_layers"] > 0


TP2, TP1_DP2 = {"tp": 2, "pp": 1, "dp": 1}, {"tp": 1, "pp": 1, "dp": 2}


def test_same_model_parallel_layout_loads_everything_in_any_format():
    for fmt in ("dp_reshardable", "fully_reshardable", "model_space"):
        plan = plan_load(TP2, fmt, dict(TP2, dp=2), True, True, "c")
        assert plan.load_rng and plan.optim_format == fmt and not plan.notes
    assert plan_load(None, "dp_reshardable", TP1_DP2, True, True, "c").load_rng  # unknown


def test_another_layout_skips_the_rng_state_saying_why():
    plan = plan_load(TP2, "fully_reshardable", TP1_DP2, True, True, "run/iter_0000002")
    assert not plan.load_rng
    (note,) = plan.notes
    assert "saved at TP2 PP1 DP1, loading at TP1 PP1 DP2" in note


def test_an_old_dp_reshardable_optimizer_at_another_layout_is_refused_up_front():
    with pytest.raises(ValueError) as err:
        plan_load(TP2, "dp_reshardable", TP1_DP2, True, True, "run/iter_0000002")
    msg = str(err.value)
    for text in ("run/iter_0000002", "TP2 PP1 DP1", "TP1 PP1 DP2",
                 "tensor_model_parallel_size=2", "no_load_optim: true"):
        assert text in msg
    # Without the optimizer state the weights reshard fine.
    assert not plan_load(TP2, "dp_reshardable", TP1_DP2, False, True, "c").load_rng


def test_adam_crosses_ep_1_and_ep_2_only_from_a_distributed_optimizer():
    ep1, ep2 = {"tp": 1, "pp": 1, "dp": 2}, {"tp": 1, "pp": 1, "dp": 2, "ep": 2}
    for saved, current in ((ep1, ep2), (ep2, ep1)):
        plan = plan_load(saved, "fully_reshardable", current, True, True, "c")
        assert plan.rename_optimizer_keys and not plan.load_rng
        assert any("Adam's state" in n and "dense and expert optimizers" in n
                   for n in plan.notes), plan.notes
        assert not plan_load(saved, "fully_reshardable", current, False, True,
                             "c").rename_optimizer_keys
    # EP 2 -> EP 4 keeps the chain: nothing to rename.
    assert not plan_load(ep2, "fully_reshardable", dict(ep2, ep=4), True, True,
                         "c").rename_optimizer_keys
    with pytest.raises(ValueError) as err:
        plan_load(ep1, "model_space", ep2, True, True, "run/iter_0000002")
    for text in ("run/iter_0000002", "model_space", "no_load_optim: true",
                 "expert_model_parallel_size=1"):
        assert text in str(err.value)


def test_check_resume_warns_and_refuses_before_any_worker_starts(tmp_path):
    from mindrl.ckpt.training.resume_check import check_resume

    run = load_recipe("grpo_tiny_cpu", cluster=ClusterResources("cpu", 2))
    current = run_recipe(run)
    write_recipe(tmp_path, {**current, "global_batch_size": current["global_batch_size"] * 2,
                            "optimizer_format": "fully_reshardable"})
    lines = check_resume(tmp_path, run, True, True).lines
    assert len(lines) == 1 and (f"global_batch_size: {current['global_batch_size'] * 2} -> "
                                f"{current['global_batch_size']}") in lines[0]
    other = dict(current["layout"], tp=current["layout"]["tp"] * 2, dp=1)
    write_recipe(tmp_path, {**current, "layout": other, "optimizer_format": "dp_reshardable"})
    with pytest.raises(ValueError, match="dp_reshardable format"):
        check_resume(tmp_path, run, True, True)
    found = check_resume(tmp_path, run, False, True)      # weights only: reshards, RNG fresh
    lines = found.lines
    assert not found.load_rng
    assert lines[0].startswith("resharding") and lines[1].startswith("RNG state")
