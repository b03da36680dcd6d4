"""Dataset handlers: each family on a good row and on rows it must reject."""

import json

import pytest

from mindrl.data.handlers import RowRejected, available_handlers, handle_row


def _rejected(name, row, map_keys=None):
    with pytest.raises(RowRejected) as e:
        handle_row(name, row, map_keys)
    return e.value.reason


def test_registry():
    assert {"r1_math", "gsm8k", "countdown", "geometry3k", "generic"} <= set(available_handlers())
    with pytest.raises(ValueError, match="unknown handler_name"):
        handle_row("nope", {})
    with pytest.raises(ValueError, match="unknown map_keys entry 'query'"):
        handle_row("r1_math", {}, {"query": "q"})


def test_r1_math():
    assert handle_row("r1_math", {"problem": " 1+2= ", "answer": "3"}) == ("1+2=", "3", {})
    assert handle_row("r1_math", {"q": "x", "a": 7}, {"prompt": "q", "label": "a"}) == \
        ("x", "7", {})
    assert _rejected("r1_math", {"answer": "3"}) == "missing_key"
    assert _rejected("r1_math", {"problem": "x", "answer": ["3"]}) == "bad_type"


def test_gsm8k():
    row = {"question": "Tom has 1,000 apples...", "answer": "He has 1000+200.\n#### 1,200"}
    question, label, extra = handle_row("gsm8k", row)
    assert (question, label) == ("Tom has 1,000 apples...", "1200")
    assert extra["solution"] == row["answer"]
    assert _rejected("gsm8k", {"question": "q", "answer": "no marker"}) == "no_final_answer"


def test_countdown():
    question, label, _ = handle_row("countdown", {"nums": [3, 5, 7], "target": 22})
    assert "[3, 5, 7]" in question and "equals 22" in question
    assert json.loads(label) == {"numbers": [3, 5, 7], "target": 22}
    assert _rejected("countdown", {"nums": [3], "target": "x"}) == "bad_type"
    assert _rejected("countdown", {"nums": [], "target": 2}) == "empty_label"
    assert _rejected("countdown", {"target": 2}) == "missing_key"


def test_geometry3k():
    assert handle_row("geometry3k", {"problem": "Find x.", "answer": "4"}) == ("Find x.", "4", {})
    assert _rejected("geometry3k", {"problem": "Find x."}) == "missing_key"


def test_generic():
    keys = {"prompt": "instruction", "query": "input", "system": "sys", "label": "output"}
    row = {"instruction": "Add:", "input": "2+2", "sys": "Be brief.", "output": "4"}
    assert handle_row("generic", row, keys) == ("Add:\n2+2", "4", {"system": "Be brief."})
    assert handle_row("generic", {"prompt": "p", "label": "l"}) == ("p", "l", {})
    assert _rejected("generic", {"prompt": b"\xff", "label": "l"}) == "undecodable"


def test_text_handlers_refuse_rows_with_images():
    """A text handler must not drop a row's images silently: the reject names the VL recipe."""
    image = {"bytes": b"\x89PNG...", "path": "0.png"}
    row = {"problem": "<image>Find x.", "answer": "4", "images": [image]}
    for name in ("geometry3k", "r1_math"):
        with pytest.raises(RowRejected, match=r"'images' holds 1 image\(s\) that the text "
                                              rf"handler '{name}' would drop.*geometry3k_vl"):
            handle_row(name, row)
    assert _rejected("generic", {"prompt": "p", "label": "l", "image": image}) == "has_images"
    assert handle_row("geometry3k", {**row, "images": []}) == ("<image>Find x.", "4", {})


def test_geometry3k_vl_keeps_markers_and_images():
    from mindrl.data.handlers import is_vision_handler

    image = {"bytes": b"png", "path": None}
    row = {"problem": " <image>Find x. ", "answer": " 4 ", "images": [image, image]}
    assert handle_row("geometry3k_vl", row) == ("<image>Find x.", "4", {"images": [image, image]})
    assert handle_row("geometry3k_vl", {"problem": "Area?", "answer": "9"})[2] == {"images": []}
    assert _rejected("geometry3k_vl", {"problem": "<image>x", "images": [image]}) == "missing_key"
    assert is_vision_handler("geometry3k_vl") and not is_vision_handler("geometry3k")
