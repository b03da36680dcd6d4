"""The on-policy distillation recipes at full size (where each places its teacher) and in
miniature (`+scale_down`: a tiny teacher over the student's vocabulary, another checkpoint,
sizes that fit the scaled cluster)."""

import pytest

from mindrl.config import ConfigError, load_recipe, make_plan
from mindrl.config.placement import devices_required
from mindrl.config.scale_down import with_cpu_slots

# recipe, divisor: the 8B teacher at the student's TP1 on its 16 devices; the 32B teacher at
# TP4 x DP2 on 8 devices of its own, the student TP1 x DP8 with its 8 engines on the other 8.
RECIPES = {"opd_qwen3_8b_to_1p7b": 8, "opd_qwen3_32b_to_1p7b": 4}


def test_the_8b_teacher_lives_in_the_students_processes(recipe_clusters):
    name = "opd_qwen3_8b_to_1p7b"
    run = load_recipe(name, cluster=recipe_clusters[name], check_paths=False)
    plan = make_plan(run, recipe_clusters[name])
    teacher, actor = plan["roles"]["teacher"], plan["roles"]["actor"]
    assert (teacher["model"], actor["model"]) == ("qwen3-8b", "qwen3-1.7b")
    assert teacher["devices"] == actor["devices"] == list(range(16))
    assert teacher["host"] == "actor" and (teacher["tp"], teacher["dp"]) == (1, 16)
    assert plan["rollout"]["instances"] == 16 and plan["fits_cluster"]


def test_the_32b_teacher_has_devices_of_its_own(recipe_clusters):
    name = "opd_qwen3_32b_to_1p7b"
    run = load_recipe(name, cluster=recipe_clusters[name], check_paths=False)
    plan = make_plan(run, recipe_clusters[name])
    teacher, actor = plan["roles"]["teacher"], plan["roles"]["actor"]
    assert teacher["model"] == "qwen3-32b" and teacher["host"] is None
    assert actor["devices"] == list(range(8)) and teacher["devices"] == list(range(8, 16))
    assert (teacher["tp"], teacher["pp"], teacher["dp"]) == (4, 1, 2)
    assert plan["rollout"]["devices"] == list(range(8)) and plan["rollout"]["instances"] == 8
    assert plan["fits_cluster"]


@pytest.mark.parametrize("name, divisor", RECIPES.items())
def test_both_distill_alone_with_the_students_vocabulary(name, divisor, recipe_clusters):
    run = load_recipe(name, cluster=recipe_clusters[name], check_paths=False)
    rl = run.rl_config
    assert (rl.distill_loss, rl.distill_estimator, rl.distill_use_task_reward) == (
        "reverse_kl", "k2", False)
    assert run.active_roles == ["actor", "teacher"]            # no reference: kl_coef 0
    assert run.models["teacher"].vocab_size == run.models["actor"].vocab_size == 151936
    assert run.role("teacher").load != run.actor_config.load
    assert "opd_dapo_math_17k_qwen3" in run.megatron_training.data_path
    assert "opd_aime2024_qwen3" in rl.val_data_path


@pytest.mark.parametrize("name, divisor", RECIPES.items())
def test_the_scaled_down_teacher_is_tiny_another_checkpoint_and_fits(name, divisor, cpu2,
                                                                     recipe_clusters):
    full = load_recipe(name, cluster=recipe_clusters[name], check_paths=False)
    mini = load_recipe(name, [f"+scale_down={divisor}"], cluster=cpu2)
    teacher, student = mini.models["teacher"], mini.models["actor"]
    assert (teacher.name, student.name) == ("tiny-qwen3", "tiny-qwen3")   # Qwen3's tiny
    assert teacher.vocab_size == student.vocab_size                      # one tokenizer
    load = mini.role("teacher").load
    assert load.endswith("/models/tiny-qwen3-teacher-mcore") and load != mini.actor_config.load
    assert mini.prepare.tokenizer == "char"     # prepare makes it over this tokenizer, seed + 2
    cfg, full_cfg = mini.role("teacher"), full.role("teacher")
    assert cfg.tensor_model_parallel_size == max(1, full_cfg.tensor_model_parallel_size
                                                 // divisor)
    assert cfg.pipeline_model_parallel_size == full_cfg.pipeline_model_parallel_size
    assert not cfg.bf16 and cfg.max_tokens_per_micro_batch == 2 * (24 + 8)  # 2 longest samples
    assert mini.resource("teacher").kind == "cpu"
    assert mini.resource("teacher").count == full.resource("teacher").count // divisor
    cluster = with_cpu_slots(cpu2, mini)
    plan = make_plan(mini, cluster, [])
    assert plan["fits_cluster"] and devices_required(mini) <= cluster.total_devices
    assert plan["roles"]["teacher"]["host"] == make_plan(
        full, recipe_clusters[name])["roles"]["teacher"]["host"]     # placed as the recipe says


def test_a_teacher_of_another_vocabulary_is_refused_before_the_miniature_hides_it(cpu2):
    # Llama-3's 128256 tokens against Qwen3's 151936: both tiny models would have 128
    with pytest.raises(ConfigError, match="teacher_config.model"):
        load_recipe("opd_qwen3_8b_to_1p7b", ["+scale_down=8", "teacher_config.model=llama3-8b"],
                    cluster=cpu2)
