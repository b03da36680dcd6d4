"""cli/preprocess_data.py: every key of a dataset recipe is a typed flag, and a flag's value is
validated as the same key in a yaml would be."""

import argparse
import dataclasses

import pytest

from cli.preprocess_data import add_recipe_flags, main
from mindrl.data import preprocess as preprocess_module
from mindrl.data.preprocess import PreprocessConfig


@pytest.fixture
def ran(monkeypatch):
    """The config the CLI would preprocess with (nothing read or written)."""
    seen = []

    def fake(cfg, progress=True):
        seen.append(cfg)
        return {"counts": {"kept": 0, "total": 0}}

    monkeypatch.setattr(preprocess_module, "preprocess", fake)
    return seen


def test_every_recipe_key_has_a_flag():
    parser = argparse.ArgumentParser()
    keys = add_recipe_flags(parser, PreprocessConfig)
    assert keys == [f.name for f in dataclasses.fields(PreprocessConfig)]
    flags = {option for action in parser._actions for option in action.option_strings}
    assert {"--min-pixels", "--max-pixels", "--map-keys", "--dataset-additional-keys",
            "--strict", "--no-strict", "--shuffle", "--no-shuffle"} <= flags


def test_pixel_bounds_and_other_keys_reach_the_config_with_their_types(ran):
    assert main(["--config", "geo3k_qwen25vl", "--no-progress", "--min-pixels", "3136",
                 "--max-pixels", "50176", "--workers", "2", "--map-keys", "prompt=question",
                 "label=answer", "images=images", "--dataset-additional-keys", "--strict",
                 "--input", "x.parquet"]) == 0
    cfg = ran[0]
    assert (cfg.min_pixels, cfg.max_pixels, cfg.workers) == (3136, 50176, 2)
    assert cfg.map_keys == {"prompt": "question", "label": "answer", "images": "images"}
    assert cfg.dataset_additional_keys == [] and cfg.strict is True and cfg.input == "x.parquet"
    # the recipe's other keys stay as the yaml has them
    assert (cfg.handler_name, cfg.max_prompt_length, cfg.shuffle, cfg.seed) == \
        ("geometry3k_vl", 2048, False, 1234)
    assert main(["--config", "geo3k_qwen25vl", "--no-progress"]) == 0
    assert (ran[1].min_pixels, ran[1].max_pixels, ran[1].workers) == (262144, 4194304, 8)
    assert main(["--config", "geo3k_qwen25vl", "--no-progress", "--no-strict",
                 "--shuffle"]) == 0
    assert (ran[2].strict, ran[2].shuffle) == (False, True)


@pytest.mark.parametrize("argv, message", [
    (["--min-pixels", "abc"], "argument --min-pixels: invalid int value: 'abc'"),
    (["--map-keys", "prompt"], "argument --map-keys: expected KEY=VALUE, got 'prompt'"),
    (["--min-pixels", "60000", "--max-pixels", "50176"],
     "geo3k_qwen25vl with --min-pixels --max-pixels: need 0 < min_pixels (60000) <= "
     "max_pixels (50176)"),
    (["--workers", "0"], "geo3k_qwen25vl with --workers: workers must be >= 1"),
])
def test_a_bad_value_is_refused_naming_the_flag(ran, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(["--config", "geo3k_qwen25vl", "--no-progress", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert ran == []


def test_pixel_bounds_on_a_text_recipe_are_refused(ran, capsys):
    with pytest.raises(SystemExit):
        main(["--config", "tiny_arith", "--no-progress", "--min-pixels", "3136"])
    assert "min_pixels / max_pixels are for image handlers" in capsys.readouterr().err
    assert ran == []
