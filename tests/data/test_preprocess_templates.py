"""Prompt templates: exact text, and the Qwen2.5 tokenizer's view of it."""

import json

import pytest

from mindrl.data.templates import get_template, load_templates, render_prompt

QWEN_R1_EXPECTED = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nA conversation between User and Assistant. The user asks a question, and "
    "the Assistant solves it. The assistant first thinks about the reasoning process in the mind "
    "and then provides the user with the answer. The reasoning process and answer are enclosed "
    "within <think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
    "process here </think><answer> answer here </answer>. Put your final answer within "
    "\\boxed{}.\nWhat is 1+1?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_qwen_r1_text_is_exact():
    assert render_prompt("qwen_r1", "What is 1+1?") == QWEN_R1_EXPECTED


def test_shipped_templates():
    names = set(load_templates())
    assert {"qwen_r1", "qwen_math_r1", "chatml", "empty"} <= names
    assert render_prompt("empty", "1+2=") == "1+2="
    assert render_prompt("chatml", "hi") == ("<|im_start|>system\nYou are a helpful assistant."
                                             "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                             "<|im_start|>assistant\n")
    assert render_prompt("chatml", "hi", system="Be brief.").startswith(
        "<|im_start|>system\nBe brief.<|im_end|>")
    assert "\\boxed{answer}" in render_prompt("qwen_math_r1", "x")


def test_adding_a_template_is_one_json_entry(tmp_path):
    path = tmp_path / "templates.json"
    path.write_text(json.dumps({"mine": {"user": "Q: {question}\nA:", "chat": False}}))
    assert get_template("mine", path).render("2+2") == "Q: 2+2\nA:"
    with pytest.raises(ValueError, match="unknown prompt template 'nope'"):
        get_template("nope", path)
    path.write_text(json.dumps({"bad": {"user": "no placeholder"}}))
    with pytest.raises(ValueError, match="must contain"):
        load_templates(path)


def test_qwen25_tokenizes_template_and_round_trips():
    from mindrl.models.tokenizers import build_qwen25_tokenizer

    tok = build_qwen25_tokenizer()
    ids = tok.encode(QWEN_R1_EXPECTED, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tok.convert_tokens_to_ids("<|im_end|>")) == 2
    assert ids[-3:] == tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == QWEN_R1_EXPECTED
