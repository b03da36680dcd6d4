"""On-policy distillation's keys and the teacher role: the tiny recipe's teacher lives in the
actor's process with its own model and checkpoint, and bad input is refused before anything
starts, naming the key: a teacher of another vocabulary or tokenizer, a checkpoint that does not
exist, none at all, an unknown loss or estimator, a negative coefficient, no devices."""

import pytest

from mindrl.config import ClusterResources, load_recipe
from mindrl.config.placement import host_of, place_roles
from mindrl.config.plan import format_plan, make_plan
from mindrl.config.roles import role_setup
from support.recipe_errors import problem_of, recipe_error

RECIPE = "distill_tiny_cpu"
CPU = ClusterResources("cpu", 2)


def refused(*overrides, **kw):
    return recipe_error(RECIPE, list(overrides), CPU, **kw)


def test_the_tiny_recipe_hosts_its_teacher_in_the_actors_process():
    run = load_recipe(RECIPE, [], cluster=CPU)
    assert run.active_roles == ["actor", "teacher"]
    assert host_of(run, "teacher") == "actor" and host_of(run, "ref") is None
    assert [(p.role, p.devices) for p in place_roles(run)] == [("actor", (0,)), ("teacher", (0,))]
    setup = role_setup(run, "teacher", pad_id=0)
    assert setup.optim is None and setup.load.endswith("tiny-qwen2-teacher-mcore")
    assert setup.max_tokens_per_micro_batch == 864
    loss = role_setup(run, "actor", pad_id=0).loss
    assert (loss.distill_loss, loss.distill_estimator, loss.distill_coef,
            loss.distill_use_task_reward) == ("reverse_kl", "k2", 1.0, False)
    assert ("distillation reverse_kl (k2) x 1 against the teacher tiny-qwen2, alone"
            in format_plan(make_plan(run, CPU)))


def test_a_teacher_has_its_own_architecture_and_devices():
    run = load_recipe(RECIPE, ["teacher_config.model=tiny-llama", "rl_config.kl_coef=0.01",
                               "+rl_config.reference_resource.num_cpus=1",
                               "rl_config.colocate_actor_teacher=false",
                               "+rl_config.teacher_resource.num_cpus=1"],
                      cluster=ClusterResources("cpu", 3))
    assert run.models["teacher"].architecture == "llama" and run.models["actor"].name == \
        "tiny-qwen2"
    assert [(p.role, p.devices, p.host) for p in place_roles(run)] == [
        ("actor", (0,), None), ("ref", (1,), None), ("teacher", (2,), None)]


def test_off_by_default_no_teacher_starts():
    run = load_recipe("grpo_tiny_cpu", [], cluster=CPU)
    assert "teacher" not in run.active_roles and run.rl_config.distill_loss is None
    assert role_setup(run, "actor", pad_id=0).loss.distill_loss is None


def test_a_teacher_of_another_vocabulary_is_refused_naming_both():
    p = problem_of(refused("teacher_config.model=tiny-qwen2-qwen25vocab"),
                   "teacher_config.model")
    assert "tiny-qwen2-qwen25vocab" in p.message and "151936" in p.message
    assert "tiny-qwen2 has 128" in p.message


def test_a_teacher_checkpoint_that_does_not_exist_is_refused(tmp_path):
    missing = tmp_path / "no-teacher"
    p = problem_of(refused(f"teacher_config.load={missing}", check_paths=True),
                   "teacher_config.load")
    assert p.message == "does not exist" and p.value == str(missing)


def test_distillation_without_a_teacher_is_refused():
    p = problem_of(refused("teacher_config.load=null"), "teacher_config.load")
    assert "needs a teacher with trained weights" in p.message
    # the teacher inherits the actor's start (named where it comes from): nothing to teach
    own = problem_of(refused("teacher_config.load=${megatron_training.load}"),
                     "megatron_training.load")
    assert "the actor's checkpoint" in own.message and "teacher_config.load" in own.fix


@pytest.mark.parametrize("override, key, words", [
    ("rl_config.distill_estimator=k4", "rl_config.distill_estimator", "k1, k2, k3"),
    ("rl_config.distill_coef=-0.1", "rl_config.distill_coef", "must not be negative"),
    ("rl_config.distill_loss=forward_kl_topk", "rl_config.distill_loss",
     "not built yet: use reverse_kl"),
    ("rl_config.distill_loss=reverse", "rl_config.distill_loss", "not a distillation loss"),
    ("rl_config.colocate_actor_teacher=false", "rl_config.teacher_resource",
     "distill_loss needs devices for the teacher"),
])
def test_bad_distill_keys_are_refused_naming_the_key(override, key, words):
    p = problem_of(refused(override), key)
    assert words in p.message


def test_a_teacher_must_share_the_students_tokenizer(tmp_path):
    from mindrl.models.tokenizers import build_tokenizer
    from mindrl.trainer.launch import check_teacher_tokenizer

    build_tokenizer("char").save_pretrained(tmp_path / "student")
    other = build_tokenizer("char")
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path / "teacher")
    same = [f"megatron_training.tokenizer_name_or_path={tmp_path / 'student'}"]
    check_teacher_tokenizer(load_recipe(RECIPE, same, cluster=CPU))     # inherited: fine
    run = load_recipe(RECIPE, same + [
        f"+teacher_config.tokenizer_name_or_path={tmp_path / 'teacher'}"], cluster=CPU)
    with pytest.raises(ValueError, match="teacher_config.tokenizer_name_or_path=.*same vocab"):
        check_teacher_tokenizer(run)


def test_skipping_zero_advantage_updates_is_refused_beside_a_distillation_term():
    err = refused("+rl_config.skip_zero_advantage_updates=true")
    assert "distillation term" in problem_of(err, "rl_config.skip_zero_advantage_updates").message
