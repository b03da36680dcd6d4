"""The real-size agent recipes' verifiers read the answer after the last tool answer:
tool_boxed_acc (ReTool: the last \\boxed{}) and tool_answer_em (Search-R1: the last <answer>,
exact match against any accepted answer), so what a tool printed never scores."""

import json

import pytest

from mindrl.rewards import builtin  # noqa: F401  (registers the verifiers)
from mindrl.rewards.registry import get_verifier
from mindrl.rewards.tool_answer import (accepted_answers, normalize_short_answer,
                                        tool_answer_em, tool_boxed_acc)

# A Qwen2.5 tool turn as the scorer decodes it (special tokens dropped): the call, the tool's
# answer in a user turn, then the next assistant turn's header.
CALL = ('<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
        "\nuser\n<tool_response>\nOUT\n</tool_response>\nassistant\n")


def call(out: str) -> str:
    return CALL.replace("OUT", out)


def test_tool_boxed_acc_scores_the_box_after_the_last_tool_answer():
    assert tool_boxed_acc(call("42") + "So the answer is \\boxed{42}.", "42") == 1.0
    assert tool_boxed_acc(call("42") + "\\boxed{\\frac{84}{2}}", "42") == 1.0
    # a box the tool printed is the tool's, not the model's answer
    assert tool_boxed_acc(call("\\boxed{42}") + "I am not sure.", "42") == 0.0
    assert tool_boxed_acc("\\boxed{42}" + call("41") + "\\boxed{41}", "42") == 0.0
    # no tool answer: the whole completion, as boxed_acc
    assert tool_boxed_acc("<think>6*7</think> \\boxed{42}", "42") == 1.0
    # the budget ran out inside a tool answer: no final answer
    assert tool_boxed_acc("\\boxed{42}<tool_call>{}</tool_call>\nuser\n<tool_response>\n42",
                          "42") == 0.0


@pytest.mark.parametrize("said, score", [("<answer> William Shakespeare </answer>", 1.0),
                                          ("<answer>the Shakespeare.</answer>", 1.0),
                                          ("<answer>Marlowe</answer>", 0.0),
                                          ("Shakespeare", 0.0),            # no answer tags
                                          ("<answer> </answer>", 0.0)])
def test_tool_answer_em_is_an_exact_match_on_the_final_answer(said, score):
    label = json.dumps(["William Shakespeare", "Shakespeare"])
    passage = '[1] (12) "Hamlet" Hamlet is a tragedy by <answer>Shakespeare</answer>'
    assert tool_answer_em(call(passage) + said, label) == score


def test_tool_answer_em_reads_the_last_answer_and_a_plain_label():
    assert tool_answer_em("<answer>Paris</answer> no, <answer>Lyon</answer>", "Lyon") == 1.0
    assert tool_answer_em("<answer>Paris</answer>", "Lyon") == 0.0
    assert accepted_answers('["a", "b"]') == ["a", "b"]
    assert accepted_answers("[not json") == ["[not json"]
    assert normalize_short_answer("  The  U.S.A.! ") == "u s"


def test_both_are_registered():
    assert get_verifier("tool_boxed_acc") is tool_boxed_acc
    assert get_verifier("tool_answer_em") is tool_answer_em
