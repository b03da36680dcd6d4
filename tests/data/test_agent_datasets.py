"""The agent recipes' data: DAPO-Math-17k's layout (a chat message list, the answer at
reward_model.ground_truth) and open-domain QA's (a question, a list of accepted answers)
through their handlers, and the search tool's corpus written beside the prompts, on tiny
hand-written parquet and jsonl files in the datasets' own layouts."""

import json

import pytest

from mindrl.data.handlers import DAPO_PREFIX, DAPO_SUFFIX, RowRejected, handle_row
from mindrl.data.indexed import load_prompt_rows, read_manifest
from mindrl.data.preprocess import PreprocessConfig, PreprocessError, preprocess
from mindrl.data.search_corpus import write_corpus
from mindrl.data.templates import render_prompt


def _dapo_row(problem: str, answer: str, wrapped: bool = True) -> dict:
    content = f"{DAPO_PREFIX}\n\n{problem}\n\n{DAPO_SUFFIX}" if wrapped else problem
    return {"data_source": "math_dapo", "ability": "MATH",
            "prompt": [{"role": "user", "content": content}],
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "a1b2"}}


def test_dapo_math_cuts_dapos_instruction_and_reads_the_nested_answer():
    assert handle_row("dapo_math", _dapo_row("What is $2^5$?", "32")) == \
        ("What is $2^5$?", "32", {})
    assert handle_row("dapo_math", _dapo_row("What is $2^5$?", "32", wrapped=False))[0] == \
        "What is $2^5$?"
    # slime's jsonl: the prompt as text and a plain label column
    row = {"prompt": f"{DAPO_PREFIX}\n\nWhat is 3?\n\n{DAPO_SUFFIX}", "label": "3"}
    assert handle_row("dapo_math", row, {"label": "label"}) == ("What is 3?", "3", {})
    with pytest.raises(RowRejected, match="reward_model.ground_truth"):
        handle_row("dapo_math", {"prompt": "x", "reward_model": {"style": "rule"}})
    with pytest.raises(RowRejected, match="without a user turn"):
        handle_row("dapo_math", {"prompt": [{"role": "system", "content": "x"}],
                                 "reward_model": {"ground_truth": "1"}})


def test_search_qa_labels_are_the_json_list_of_accepted_answers():
    question, label, _ = handle_row("search_qa", {"question": "who wrote hamlet",
                                                  "golden_answers": ["Shakespeare", "W. S."]})
    assert question == "who wrote hamlet?" and json.loads(label) == ["Shakespeare", "W. S."]
    # Search-R1's own parquet: the answers at reward_model.ground_truth.target
    row = {"question": "capital of france?", "reward_model": {"ground_truth": {"target": ["Paris"]}}}
    assert handle_row("search_qa", row, {"label": "reward_model.ground_truth"})[1] == '["Paris"]'
    assert handle_row("search_qa", {"question": "q?", "golden_answers": "one"})[1] == '["one"]'
    with pytest.raises(RowRejected) as e:
        handle_row("search_qa", {"question": "q?", "golden_answers": [" ", ""]})
    assert e.value.reason == "empty_label"


def test_dapo_parquet_end_to_end(tmp_path):
    """DAPO-Math-17k's nested columns as parquet stores them, through the recipe's handler
    and tool-use template: prompts without DAPO's wrapper, labels the ground truths."""
    import datasets

    data = tmp_path / "dapo.parquet"
    datasets.Dataset.from_list([_dapo_row("What is $1+1$?", "2"),
                                _dapo_row("What is $2+2$?", "4")]).to_parquet(str(data))
    cfg = PreprocessConfig.from_dict(dict(
        input=str(data), tokenizer_name_or_path="char", output_prefix=str(tmp_path / "d" / "p"),
        handler_name="dapo_math", prompt_type="retool_boxed", max_prompt_length=1024))
    manifest = preprocess(cfg, progress=False)
    assert manifest["counts"]["kept"] == 2 and "corpus" not in manifest
    rows = load_prompt_rows(cfg.output_prefix)
    assert [r["label"] for r in rows] == ["2", "4"]
    assert rows[0]["prompt"] == render_prompt("retool_boxed", "What is $1+1$?")
    assert "Answer:" not in rows[0]["prompt"] and "\\boxed{}" in rows[0]["prompt"]


def test_a_search_recipe_writes_its_corpus_beside_the_prompts(tmp_path):
    questions = tmp_path / "nq.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "train_0", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]},
        {"id": "train_1", "question": "capital of france", "golden_answers": ["Paris"]}]))
    passages = tmp_path / "wiki-18.jsonl"       # Search-R1's layout: id + contents
    passages.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "0", "contents": "\"Hamlet\"\nHamlet is a tragedy by William Shakespeare."},
        {"id": "1", "contents": "   "},                        # no text: skipped, counted
        {"id": "2", "contents": "\"Paris\"\nParis is the capital of France."},
        {"id": "3", "contents": "\"Lyon\"\nLyon is a city in France."}]))
    corpus = tmp_path / "out" / "corpus.jsonl"
    cfg = PreprocessConfig.from_dict(dict(
        input=str(questions), tokenizer_name_or_path="char",
        output_prefix=str(tmp_path / "out" / "train"), handler_name="search_qa",
        prompt_type="search_r1", max_prompt_length=1024, corpus_input=str(passages),
        corpus_output=str(corpus), corpus_max_docs=2))
    manifest = preprocess(cfg, progress=False)
    assert manifest["corpus"] == {"input": str(passages), "output": str(corpus), "docs": 2,
                                  "skipped": 1}
    assert read_manifest(cfg.output_prefix)["corpus"]["docs"] == 2
    from mindrl.tools.search import BM25, load_corpus

    docs = load_corpus(str(corpus))
    assert [doc_id for doc_id, _ in docs] == ["0", "2"]
    assert BM25(docs).top("capital of France", 1)[0][0] == "2"
    assert [r["label"] for r in load_prompt_rows(cfg.output_prefix)] == ['["Shakespeare"]',
                                                                         '["Paris"]']
    assert not list((tmp_path / "out").glob("*.tmp*"))


def test_corpus_keys_go_together():
    base = dict(input="x", tokenizer_name_or_path="char", output_prefix="o")
    with pytest.raises(PreprocessError, match="go together"):
        PreprocessConfig.from_dict({**base, "corpus_input": "wiki.jsonl"})
    with pytest.raises(PreprocessError, match="corpus_max_docs"):
        PreprocessConfig.from_dict({**base, "corpus_max_docs": 10})


def test_write_corpus_reads_parquet_with_titles(tmp_path):
    """DPR's psgs_w100 layout (id, text, title) from parquet: the title leads the text."""
    import datasets

    source = tmp_path / "psgs.parquet"
    datasets.Dataset.from_list([{"id": 7, "title": "Aaron", "text": "Aaron is a prophet."},
                                {"id": 8, "title": "", "text": "No title here."}]
                               ).to_parquet(str(source))
    done = write_corpus(source, tmp_path / "c.jsonl")
    assert done["docs"] == 2 and done["skipped"] == 0
    lines = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert lines == [{"id": "7", "text": "\"Aaron\"\nAaron is a prophet."},
                     {"id": "8", "text": "No title here."}]
    with pytest.raises(ValueError, match="no passage with text"):
        (tmp_path / "empty.jsonl").write_text('{"id": 1}\n')
        write_corpus(tmp_path / "empty.jsonl", tmp_path / "e.jsonl")
    assert not (tmp_path / "e.jsonl").exists()
