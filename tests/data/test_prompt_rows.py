"""Prompt rows made ready at start-up: a dataset's additional keys reach a user's verifier as
keywords from both readers (jsonl and indexed), and prompts over max_prompt_length are set
aside with their rows named."""

import json

import pytest

from mindrl.data.batch import Batch
from mindrl.data.indexed import load_prompt_rows
from mindrl.data.preprocess import PreprocessConfig, preprocess
from mindrl.data.prompt_file import write_prompt_file
from mindrl.data.prompt_rows import (extra_keys, per_prompt_fields, prepare_rows,
                                     write_rejects)

ROWS = [{"prompt": "1+2=", "label": "3", "numbers": [1, 2], "target": "3"},
        {"prompt": "4+4+4=", "label": "12", "numbers": [4, 4, 4], "target": "12"},
        {"prompt": "9+9+9+9+9+9+9+9=", "label": "72", "numbers": [9] * 8, "target": "72"}]
KEYS = ["labels", "numbers", "target"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from mindrl.models.tiny import make_tiny_model

    return make_tiny_model("tiny-qwen2", "char", tmp_path_factory.mktemp("m") / "tiny")


def _sources(tmp_path, tokenizer_dir):
    jsonl = write_prompt_file(ROWS, tmp_path / "rows.jsonl")
    cfg = PreprocessConfig.from_dict(dict(
        input=str(jsonl), tokenizer_name_or_path=str(tokenizer_dir),
        output_prefix=str(tmp_path / "indexed" / "data"), handler_name="r1_math",
        map_keys={"prompt": "prompt", "label": "label"}, prompt_type="empty",
        dataset_additional_keys=KEYS, log_interval=0))
    preprocess(cfg, progress=False)
    return {"jsonl": str(jsonl), "indexed": cfg.output_prefix}


def test_extra_keys_reach_a_users_verifier_from_both_readers(tmp_path, tokenizer_dir):
    from transformers import AutoTokenizer

    from mindrl.rewards import RuleReward

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    keys = extra_keys(KEYS)
    assert keys == ["numbers", "target"]
    reward = RuleReward(["test_sum_of_numbers"], [1.0], worker_imports=["support.extra_key_verifiers"])
    try:
        for reader, source in _sources(tmp_path, tokenizer_dir).items():
            ready = prepare_rows(load_prompt_rows(source), source, keys, 64,
                                 lambda text: tok(text)["input_ids"])
            assert [r["numbers"] for r in ready.rows] == [row["numbers"] for row in ROWS], reader
            batch = Batch.from_prompts([r["prompt_ids"] for r in ready.rows], 2, 0,
                                       **per_prompt_fields(ready.rows, keys))
            extras = [{k: batch[k][i] for k in keys} for i in range(len(batch))]
            completions = ["3", "2", "12", "12", "72", "71"]
            scores, _ = reward.score(completions, batch["label"], extras)
            assert scores == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0], reader
    finally:
        reward.close()


def test_a_row_missing_an_extra_key_is_named():
    rows = [dict(ROWS[0]), {"prompt": "2+2=", "label": "4"}]
    with pytest.raises(ValueError, match=r"data.jsonl: row 1 has no \['numbers'\].*"
                                         "dataset_additional_keys"):
        prepare_rows(rows, "data.jsonl", ["numbers"], 64, lambda t: list(t))


def test_prompts_over_max_prompt_length_are_set_aside_and_named(tmp_path):
    ready = prepare_rows(ROWS, "data.jsonl", [], 6, lambda t: list(t.encode()))
    assert [r["prompt"] for r in ready.rows] == ["1+2=", "4+4+4="]
    assert ready.rejected == [{"row": 2, "prompt_tokens": 16}]
    write_rejects(ready.rejected, "data.jsonl", 6, tmp_path / "rejects.jsonl")
    lines = (tmp_path / "rejects.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"source": "data.jsonl", "row": 2,
                                               "prompt_tokens": 16, "max_prompt_length": 6}]
    with pytest.raises(ValueError, match="all 3 prompts are longer than "
                                         "rl_config.max_prompt_length=2"):
        prepare_rows(ROWS, "data.jsonl", [], 2, lambda t: list(t.encode()))
