"""The echo warm start (models/warm_start.py): what its documents train (the random text and
the repeat, never the inserted answer), that they never hold the task nor a call followed by
its answer, and that a short warm start writes a loadable model beside an untouched input."""

import random

import pytest
import torch

from mindrl.models import warm_start as ws
from mindrl.models.tiny import make_tiny_model
from mindrl.models.tokenizers import TOOL_MARKERS, build_tokenizer

MARKERS = [1001, 1002, 1003, 1004]   # call, call end, answer, answer end
END = 9
CHARS = {c: ord(c) for c in ws.ALPHABET}


def _docs(count, max_prefix=ws.MAX_PREFIX, seed=0):
    rng = random.Random(seed)
    return [ws.echo_document(rng, CHARS, MARKERS, END, max_prefix) for _ in range(count)]


def test_the_copy_and_the_random_text_are_trained_and_the_inserted_answer_never():
    for ids, kinds in _docs(500):
        assert len(kinds) == len(ids) - 1
        start, end = ids.index(1003), ids.index(1004)
        echo = ids[start + 1:end]
        assert ids[end + 1:] == echo + [END]                       # the repeat, then its end
        targets = {kind: [ids[t + 1] for t, k in enumerate(kinds) if k == kind]
                   for kind in (ws.TEXT, ws.COPY)}
        assert targets[ws.COPY] == echo + [END]
        assert targets[ws.TEXT] == ids[1:start]                    # the text after its first
        # the answer marker, the answer and its end marker are inserted: never a target
        assert all(k == ws.NONE for k in kinds[start - 1 if start else 0:end])


def test_no_document_holds_a_call_answered_and_the_markers_keep_their_rate():
    prefixes = [ids[:ids.index(1003)] for ids, _ in _docs(3000)]
    assert all(1003 not in p and 1004 not in p for p in prefixes)   # one answer, at its end
    tokens = [t for p in prefixes for t in p]
    for marker in (1001, 1002):
        rate = tokens.count(marker) / len(tokens)
        assert abs(rate - ws.CALL_MARKER_RATE) < 0.006, (marker, rate)
    # the text never writes the task: no "a+b=" before the answer
    text = ["".join(chr(t) for t in p if t < 1000) for p in prefixes]
    assert sum("+" in t and "=" in t for t in text) < len(text)     # random, not a prompt
    assert max(len(p) for p in prefixes) == ws.MAX_PREFIX


def test_the_short_texts_come_first():
    tok = build_tokenizer("char_tools")
    batches = list(ws.echo_batches(tok, 10, seed=0))
    widths = [inputs.shape[1] for inputs, _ in batches]
    longest_short = ws.SHORT_PREFIX + 2 * ws.MAX_ECHO + 3
    assert max(widths[:5]) <= longest_short < max(widths[5:])


def test_a_warm_start_writes_a_loadable_model_and_leaves_its_input_alone(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    init = make_tiny_model("tiny-qwen2", "char_tools", tmp_path / "init", seed=0)
    before = {f.name: f.read_bytes() for f in init.iterdir()}
    losses = ws.warm_start(init, tmp_path / "warm", "echo", steps=40, seed=0)
    assert len(losses) == 40 and sum(losses[-5:]) / 5 < losses[0] - 0.3
    assert {f.name: f.read_bytes() for f in init.iterdir()} == before
    tok = AutoTokenizer.from_pretrained(tmp_path / "warm", local_files_only=True)
    assert tok.convert_tokens_to_ids(list(TOOL_MARKERS)) == [99, 100, 101, 102]
    warm = AutoModelForCausalLM.from_pretrained(tmp_path / "warm", local_files_only=True)
    cold = AutoModelForCausalLM.from_pretrained(init, local_files_only=True)
    assert not torch.equal(warm.model.embed_tokens.weight, cold.model.embed_tokens.weight)
    with pytest.raises(FileExistsError):        # never over an existing model
        ws.warm_start(init, tmp_path / "warm", "echo", steps=1, seed=0)
    with pytest.raises(ValueError, match="prepare.warm_start='sft'"):
        ws.warm_start(init, tmp_path / "other", "sft", steps=1, seed=0)


def test_a_recall_document_gives_back_one_of_its_characters_and_computes_nothing():
    rng = random.Random(0)
    chars = {**CHARS, "=": ord("=")}
    seen_positions = set()
    for _ in range(2000):
        ids, kinds = ws.recall_document(rng, chars, END)
        assert len(kinds) == len(ids) - 1
        text, answer = ids[:-3], ids[-2]
        assert ids[-3] == ord("=") and ids[-1] == END and ord("=") not in text
        assert 1 <= len(text) <= ws.MAX_RECALL and answer in text
        seen_positions.add(text.index(answer) / len(text))
        trained = {k: [ids[t + 1] for t, kind in enumerate(kinds) if kind == k]
                   for k in (ws.TEXT, ws.COPY)}
        assert trained[ws.COPY] == [answer, END] and trained[ws.TEXT] == text[1:]
    # which character comes back is random: early, middle and late ones alike
    assert min(seen_positions) == 0 and max(seen_positions) > 0.9


def test_a_recall_warm_start_runs_on_the_plain_char_tokenizer(tmp_path):
    init = make_tiny_model("tiny-qwen2", "char", tmp_path / "init", seed=0)
    losses = ws.warm_start(init, tmp_path / "warm", "recall", steps=30, seed=0)
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < losses[0] - 0.3
