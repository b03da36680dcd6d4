"""The synthetic geometry3k-layout image task: columns, balanced answers, a test split whose
images training never saw, and the tiny recipe that preprocesses it."""

import hashlib
import io
import json
from collections import Counter

import pytest
from PIL import Image

from mindrl.data.vl_images import image_token_count
from mindrl.data.vl_task import (ANSWERS, BACKGROUND, COLOURS, QUESTIONS, vl_task_rows,
                                 write_vl_task)


def _rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _hashes(rows):
    return {hashlib.sha256(image["bytes"]).hexdigest() for row in rows for image in row["images"]}


def test_colour_task_is_balanced_and_held_out(tmp_path):
    paths = write_vl_task(tmp_path, num_train=48, num_val=16, seed=3, question="colour")
    train, test = _rows(paths["train"]), _rows(paths["test"])
    assert Counter(r["answer"] for r in train) == {a: 16 for a in "123"}
    assert Counter(r["answer"] for r in test) == {"1": 6, "2": 5, "3": 5}
    assert not _hashes(train) & _hashes(test) and len(_hashes(test)) == 16
    for row in train + test:
        assert row["problem"] == QUESTIONS["colour"] and row["problem"].count("<image>") == 1
        assert len(row["images"]) == 1 and row["images"][0]["path"].endswith(".png")
    # the answer is in the pixels: the commonest non-background colour is the answer's
    for row in train:
        image = Image.open(io.BytesIO(row["images"][0]["bytes"]))
        assert image.size == (56, 56)
        colours = {colour: n for n, colour in image.getcolors(maxcolors=56 * 56)}
        colours.pop(BACKGROUND)
        assert max(colours, key=colours.get) == COLOURS[int(row["answer"]) - 1][1]
    again = write_vl_task(tmp_path / "again", 48, 16, seed=3, question="colour")
    assert _rows(again["train"]) == train           # the same seed draws the same images


def test_mixed_kinds_balanced_per_kind_and_two_image_rows(tmp_path):
    paths = write_vl_task(tmp_path, num_train=80, num_val=20, seed=0, question="mixed",
                          size=84)
    train = _rows(paths["train"])
    assert Counter(r["kind"] for r in train) == {"shape": 20, "count": 20, "digit": 20,
                                                 "compare": 20}
    for kind in ("shape", "count", "digit", "compare"):
        answers = Counter(r["answer"] for r in train if r["kind"] == kind)
        assert max(answers.values()) - min(answers.values()) <= 1, kind
        assert set(answers) == set(ANSWERS[kind]) or kind == "digit"
    assert all(len(r["images"]) == r["problem"].count("<image>") == (2 if r["kind"] ==
                                                                    "compare" else 1)
               for r in train)
    assert not _hashes(train) & _hashes(_rows(paths["test"]))


def test_avoided_images_are_redrawn_and_errors():
    first = vl_task_rows("shape", 8, seed=1, size=56)
    avoid = {hashlib.sha256(row.images[0]).hexdigest() for row in first}
    redrawn = vl_task_rows("shape", 8, seed=1, size=56, avoid=avoid)
    assert [r.answer for r in redrawn] == [r.answer for r in first]   # the same plan
    assert not avoid & {hashlib.sha256(r.images[0]).hexdigest() for r in redrawn}
    with pytest.raises(ValueError, match="unknown question kind 'colours'"):
        vl_task_rows("colours", 4, seed=0, size=56)
    with pytest.raises(ValueError, match="num_train=0"):
        write_vl_task("/nonexistent", 0, 1)


def test_tiny_recipe_preprocesses_the_synthetic_set(tmp_path, capsys):
    """configs/datasets/tiny_vl_shapes.yaml on the CLI's output: every row kept, 4 image tokens
    per prompt, the question alone after the image (no chat turns), a one-digit label."""
    from cli.make_synthetic_vl_data import main as make_data
    from cli.preprocess_data import main as preprocess_main
    from mindrl.data.indexed import load_prompt_rows
    from mindrl.models.processors import write_vl_tokenizer_and_processor

    write_vl_tokenizer_and_processor(tmp_path / "model")
    assert make_data(["--out", str(tmp_path / "data"), "--num-train", "16",
                      "--num-val", "4"]) == 0
    for split in ("train", "test"):
        assert preprocess_main(["--config", "tiny_vl_shapes", "--no-progress",
                                "--input", str(tmp_path / "data" / f"{split}.parquet"),
                                "--tokenizer-name-or-path", str(tmp_path / "model"),
                                "--output-prefix", str(tmp_path / "data" / split)]) == 0
        counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert counts["kept"] == counts["total"] == (16 if split == "train" else 4)
    rows = load_prompt_rows(tmp_path / "data" / "train")
    question = QUESTIONS["colour"].replace("<image>", "")
    assert {r["prompt"] for r in rows} == {
        "<|vision_start|><|image_pad|><|vision_end|>" + question}
    assert all(len(r["images"]) == 1 and r["label"] in "1234" and len(r["label"]) == 1
               for r in rows)
    sizes = {Image.open(io.BytesIO(r["images"][0])).size for r in rows}
    assert sizes == {(56, 56)} and image_token_count(56, 56) == 4
