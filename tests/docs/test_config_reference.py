"""docs/config-reference.md is the generator's output for today's schema, and every schema key
has a meaning; a key removed from the meanings, or a page edited by hand, is reported."""

from __future__ import annotations

import dataclasses

from mindrl.config import reference
from mindrl.config.key_docs import KEY_DOCS
from mindrl.config.schema import GenerateConfig, RLConfig, SamplingConfig


def test_page_equals_the_generator_output():
    found = reference.differences(reference.PAGE.read_text())
    assert found == [], ("docs/config-reference.md differs from mindrl/config/schema.py "
                         "(run `make docs`):\n" + "\n".join(found))
    assert reference.PAGE.read_text() == reference.render()


def test_every_schema_key_has_a_description():
    assert reference.problems() == [], "\n".join(reference.problems())


def test_keys_come_from_the_schema():
    keys = set(reference.all_keys())
    for f in dataclasses.fields(RLConfig):
        assert f"rl_config.{f.name}" in keys
    for f in dataclasses.fields(SamplingConfig):
        assert f"generate_config.sampling_config.{f.name}" in keys
    assert "generate_config.infer_tensor_parallel_size" in keys
    assert {"run_dir", "dry_run", "megatron_training.seed",
            "rl_config.actor_resource.num_npus", "prepare.task"} <= keys
    # The role sections share megatron_training's table, the resources one table.
    assert not any(k.startswith(("actor_config.", "rl_config.reward_resource."))
                   for k in keys)
    titles = [t.prefix for t in reference.tables()]
    assert titles.index("generate_config") < titles.index("generate_config.sampling_config")


def test_types_and_defaults_read_from_the_fields():
    page = reference.render()
    assert "| `max_num_seqs` | int | `256` |" in page
    assert "| `kv_cache_memory_bytes` | int or null | `null` |" in page
    assert "| `verify_sync` | one of: every, first, off | `every` |" in page
    assert "| `global_batch_size` | int | `required` |" in page
    assert "| `dataset_additional_keys` | list of str | `[]` |" in page
    default = GenerateConfig().sampling_config.max_tokens
    assert f"| `max_tokens` | int | `{default}` |" in page


def test_a_key_without_description_is_reported_with_where_to_add_it():
    docs = dict(KEY_DOCS)
    del docs["rl_config.kl_coef"]
    docs["rl_config.no_such_key"] = "gone"
    assert reference.missing_descriptions(docs) == ["rl_config.kl_coef"]
    problems = reference.problems(docs)
    assert problems == [
        "rl_config.kl_coef: no description; add one to KEY_DOCS in mindrl/config/key_docs.py",
        "rl_config.no_such_key: described in mindrl/config/key_docs.py but not a schema key; "
        "remove it"]
    try:
        reference.render(docs)
    except ValueError as e:
        assert "rl_config.kl_coef" in str(e) and "mindrl/config/key_docs.py" in str(e)
    else:
        raise AssertionError("render() accepted a key without a description")


def test_a_page_missing_a_key_is_reported():
    page = reference.render()
    assert reference.page_keys(page) == reference.all_keys()
    assert reference.differences(page) == []
    row = next(line for line in page.splitlines() if line.startswith("| `kl_coef` |"))
    assert reference.differences(page.replace(row + "\n", "")) == [
        "rl_config.kl_coef: in the schema, missing from the page"]
    renamed = page.replace("| `max_tokens` |", "| `max_token` |")
    assert reference.differences(renamed) == [
        "generate_config.sampling_config.max_tokens: in the schema, missing from the page",
        "generate_config.sampling_config.max_token: on the page, not in the schema"]
    reworded = page.replace("prompts per policy update", "prompts per update")
    assert reference.differences(reworded) == ["the page's text differs from the generator's"]


def test_check_mode(tmp_path, monkeypatch, capsys):
    page = tmp_path / "config-reference.md"
    monkeypatch.setattr(reference, "PAGE", page)
    monkeypatch.setattr(reference, "REPO_ROOT", tmp_path)
    assert reference.main(["--check"]) == 1                 # missing
    assert reference.main(["--write"]) == 0
    assert reference.main(["--check"]) == 0
    page.write_text(page.read_text().replace("| `kl_coef` |", "| `kl_cof` |"))
    assert reference.main(["--check"]) == 1                 # edited by hand
    assert "make docs" in capsys.readouterr().err
