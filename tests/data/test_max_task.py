"""The default's task: max of two digits, a held-out split training never sees, right labels."""

import pytest

from mindrl.data.max_task import max_problem, max_problems, max_split

ALL = {(a, b) for a in range(10) for b in range(10)}


def test_labels_are_the_larger_digit():
    assert max_problem(3, 7).prompt == "max(3,7)=" and max_problem(3, 7).label == "7"
    assert max_problem(9, 2).label == "9" and max_problem(5, 5).label == "5"
    assert max_problem(0, 0).label == "0"
    with pytest.raises(ValueError, match="digits"):
        max_problem(10, 1)
    with pytest.raises(ValueError, match="digits"):
        max_problem(-1, 1)


def test_split_is_disjoint_covering_and_seeded():
    train, held = max_split(25, seed=0)
    assert len(held) == 25 and len(train) == 75
    assert set(train) | set(held) == ALL and not set(train) & set(held)
    # training still rewards every answer and shows every digit on both sides
    assert {max(p) for p in train} == set(range(10))
    assert {a for a, _ in train} == set(range(10)) == {b for _, b in train}
    assert (0, 0) in train                     # the only pair whose answer is 0
    assert max_split(25, seed=0) == (train, held)
    assert max_split(25, seed=1)[1] != held
    assert max_split(0) == (sorted(ALL), [])


def test_split_refuses_what_it_cannot_hold_out():
    with pytest.raises(ValueError, match="in \\[0, 99\\]"):
        max_split(100)
    with pytest.raises(ValueError, match="hold out at most"):
        max_split(95)


def test_problems_come_only_from_the_given_pairs():
    train, held = max_split(25, seed=0)
    problems = max_problems(2000, train, seed=3)
    seen = {(int(q.prompt[4]), int(q.prompt[6])) for q in problems}
    assert seen == set(train)                  # all 75 drawn, none held out
    assert all(q.label == str(max(int(q.prompt[4]), int(q.prompt[6]))) for q in problems)
    assert max_problems(50, train, seed=3) == problems[:50]
    with pytest.raises(ValueError):
        max_problems(5, [], seed=0)


def test_the_demo_recipe_writes_the_split_it_validates_on(tmp_path, monkeypatch):
    """grpo_tiny_max_cpu's `prepare` (no model asked): training prompts only from the trained
    pairs, the validation file = each held-out pair once, labelled right."""
    from mindrl.config import ClusterResources, load_recipe
    from mindrl.data.prompt_file import read_prompt_file
    from mindrl.trainer.prepare import prepare_artifacts

    monkeypatch.setenv("MINDRL_WORK_DIR", str(tmp_path))
    run = load_recipe("grpo_tiny_max_cpu", ["prepare.tiny_model=null"],
                      cluster=ClusterResources("cpu", 2), check_paths=False)
    assert run.rl_config.verifier_function == ["max_digit"] and run.prepare.task == "max"
    made = prepare_artifacts(run)
    assert len(made) == 2 and "25 prompts (held-out pairs never trained on)" in made[1]
    train, held = max_split(run.prepare.holdout_pairs, run.prepare.seed)
    rows = read_prompt_file(run.megatron_training.data_path)
    val = read_prompt_file(run.rl_config.val_data_path)
    assert len(rows) == run.prepare.num_prompts
    assert {r["prompt"] for r in rows} == {max_problem(*p).prompt for p in train}
    assert [(r["prompt"], r["label"]) for r in val] == \
        [(max_problem(*p).prompt, str(max(p))) for p in held]
    assert prepare_artifacts(run) == []          # made once, then left alone
