"""A vision-language recipe whose tokenizer directory has no image processor (a bare
save_pretrained of the model, converted) stops at the path check before any worker starts,
naming the key, the missing files and the fix; a directory the processor loader accepts passes.

The GRPO parser still refuses VL models until the trainer feeds images (config/parse.py), so
the VL recipe here is the tiny text recipe with its models swapped for tiny-qwen25vl."""

import dataclasses
import os

import pytest

from mindrl.ckpt import convert_checks
from mindrl.config import ClusterResources, ConfigError, hf_files, load_recipe
from mindrl.config.errors import PATHS
from mindrl.config.model_spec import load_model_spec
from mindrl.config.validate import find_problems
from mindrl.models import processors

CPU2 = ClusterResources("cpu", 2)


def _vl_run(text_run, tokenizer_dir, actor_tokenizer_dir=None, model="tiny-qwen25vl"):
    """text_run with every role on `model`, reading its tokenizer (and processor) from
    tokenizer_dir; the actor from actor_tokenizer_dir when given (its own key)."""
    spec = load_model_spec(model)
    shared = dataclasses.replace(text_run.megatron_training, model=spec.name,
                                 tokenizer_name_or_path=str(tokenizer_dir))
    roles = {r: dataclasses.replace(text_run.role(r), model=spec.name,
                                    tokenizer_name_or_path=str(tokenizer_dir))
             for r in ("actor", "ref", "reward")}
    if actor_tokenizer_dir is not None:
        roles["actor"] = dataclasses.replace(roles["actor"],
                                             tokenizer_name_or_path=str(actor_tokenizer_dir))
    return dataclasses.replace(text_run, model=spec, megatron_training=shared,
                               actor_config=roles["actor"], ref_config=roles["ref"],
                               reward_config=roles["reward"],
                               models={r: spec for r in text_run.models})


def _processor_problems(run):
    return [p for p in find_problems(run, CPU2, paths=True) if "image processor" in p.message]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """(the tiny text recipe, a bare model folder, a folder with processor and tokenizer)."""
    root = tmp_path_factory.mktemp("vl_processor")
    saved = os.environ.get("MINDRL_WORK_DIR")
    os.environ["MINDRL_WORK_DIR"] = str(root / "work")
    try:
        text_run = load_recipe("grpo_tiny_cpu", cluster=CPU2)
    finally:
        if saved is None:
            os.environ.pop("MINDRL_WORK_DIR")
        else:
            os.environ["MINDRL_WORK_DIR"] = saved
    bare = root / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")       # what a bare save_pretrained leaves
    (bare / "model.safetensors").write_bytes(b"")
    full = root / "full"
    processors.write_vl_tokenizer_and_processor(full)
    return text_run, bare, full


def test_vl_tokenizer_dir_without_processor_is_refused_naming_key_files_and_fix(dirs):
    text_run, bare, _ = dirs
    run = _vl_run(text_run, bare)
    assert {"actor", "ref"} <= set(run.active_roles)   # two roles read the shared key
    problems = _processor_problems(run)
    assert len(problems) == 1, problems                  # said once for the shared key
    (problem,) = problems
    assert problem.key == "megatron_training.tokenizer_name_or_path"
    assert problem.value == str(bare) and problem.category == PATHS
    text = str(ConfigError(problems))
    for piece in (str(bare / "preprocessor_config.json"), str(bare / "processor_config.json"),
                  "tiny-qwen25vl", "--tokenizer-model", "copy the original HF model's "
                  "processor files", "video_preprocessor_config.json"):
        assert piece in text, text
    # What the check refuses, the loader it stands in for refuses too.
    with pytest.raises(processors.ProcessorError, match="no image processor"):
        processors.load_vl_processor(bare)


def test_the_actor_own_key_is_named(dirs):
    text_run, bare, full = dirs
    problems = _processor_problems(_vl_run(text_run, full, actor_tokenizer_dir=bare))
    assert [p.key for p in problems] == ["actor_config.tokenizer_name_or_path"]


def test_a_directory_the_loader_accepts_passes(dirs):
    text_run, _, full = dirs
    assert _processor_problems(_vl_run(text_run, full)) == []
    assert type(processors.load_vl_processor(full)).__name__ == "Qwen2_5_VLProcessor"
    # transformers 5 writes the image processor into processor_config.json only.
    assert not (full / "preprocessor_config.json").exists()


def test_a_text_model_needs_no_processor(dirs):
    text_run, bare, _ = dirs
    assert _processor_problems(_vl_run(text_run, bare, model="tiny-qwen2")) == []


def test_processor_file_names_have_one_definition():
    assert processors.IMAGE_PROCESSOR_FILES is hf_files.IMAGE_PROCESSOR_FILES
    assert convert_checks.IMAGE_PROCESSOR_FILES is hf_files.IMAGE_PROCESSOR_FILES
    assert convert_checks.PROCESSOR_FILES is hf_files.PROCESSOR_FILES
    assert set(hf_files.IMAGE_PROCESSOR_FILES) <= set(hf_files.PROCESSOR_FILES)
