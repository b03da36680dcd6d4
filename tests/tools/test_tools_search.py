"""search: BM25 over a local jsonl corpus."""

import pytest

from mindrl.tools import ToolError, ToolLimits
from mindrl.tools import context
from mindrl.tools.search import BM25, search, tokenize


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [('paris', "Paris is the capital and largest city of France."),
            ('lyon', "Lyon is a city in France, known for its food."),
            ('banana', "The banana is a yellow fruit. Bananas grow in bunches."),
            ('berlin', "Berlin is the capital of Germany.")]
    import json
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in rows) + "\n")
    with context.using(context.ToolContext(ToolLimits(search_corpus=str(path)))):
        yield path


def test_bm25_ranks_the_matching_documents_first(corpus):
    answer = search("capital of France", top_k=2)
    assert answer.splitlines() == ["[1] (paris) Paris is the capital and largest city of France.",
                                   "[2] (berlin) Berlin is the capital of Germany."]
    assert search("yellow fruit", top_k=1).startswith("[1] (banana)")
    assert search("zebra quantum") == "no results"
    assert len(search("city", top_k=10).splitlines()) == 2


def test_bm25_scores_by_hand():
    index = BM25([("a", "x y"), ("b", "x x x z z z z z"), ("c", "w")])
    scores = index.scores("x")
    assert set(scores) == {0, 1} and scores[1] > scores[0] > 0   # tf beats length here
    assert index.top("w", 3)[0][0] == "c" and tokenize("Hello, World_2!") == ["hello", "world", "2"]


def test_search_errors(corpus, tmp_path):
    with pytest.raises(ToolError, match="top_k must be between 1 and 10"):
        search("x", top_k=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\n{"text": "no id"}\n')
    with context.using(context.ToolContext(ToolLimits(search_corpus=str(bad)))):
        with pytest.raises(ToolError, match="bad.jsonl:2: a corpus line must be"):
            search("ok")
    with context.using(context.ToolContext(ToolLimits(search_corpus=str(tmp_path / "no")))):
        with pytest.raises(ToolError, match="cannot be read"):
            search("ok")
    with context.using(context.ToolContext(ToolLimits())):
        with pytest.raises(ToolError, match="search has no corpus"):
            search("ok")
