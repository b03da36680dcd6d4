"""The final answer of a multi-turn episode is the text after the last tool answer."""

import pytest

from mindrl.rewards.tool_answer import final_answer, tool_answer, tool_answer_digits

CALL = "<tool_call></tool_call><tool_response>579</tool_response>"


def test_only_the_text_after_the_last_tool_answer_scores():
    assert final_answer(CALL + "579") == "579"
    assert tool_answer(CALL + "579", "579") == 1.0
    assert tool_answer(CALL, "579") == 0.0                 # the tool's own answer never scores
    assert tool_answer(CALL + CALL.replace("579", "1") + "579", "579") == 1.0
    assert tool_answer("579", "579") == 1.0                # no call: the whole completion


@pytest.mark.parametrize("answer,score", [("579", 1.0), ("5", 0.3), ("57", 0.6),
                                          ("578", 0.6), ("5790", 0.9), ("", 0.0), ("9", 0.0)])
def test_the_shaped_score_counts_right_leading_characters(answer, score):
    assert tool_answer_digits(CALL + answer, "579") == pytest.approx(score)


def test_the_next_turn_header_is_not_part_of_the_answer():
    # as Sampler.score decodes an inserted char-format suffix (specials dropped) and kept
    turn = "<tool_call></tool_call>\n<tool_response>\n579\n</tool_response>"
    assert final_answer(turn + "\nassistant\n579") == "579"
    assert final_answer(turn + "<|im_end|>\n<|im_start|>assistant\n57") == "57"
    assert tool_answer_digits(turn + "\nassistant\n579", "579") == 1.0



def test_an_episode_cut_inside_a_tool_answer_has_no_final_answer():
    cut = "1111</tool_call>\n<tool_response>\nerror: </tool_call> with"
    assert final_answer(cut) == "" and tool_answer_digits(cut, "1143") == 0.0


def test_without_a_tool_answer_only_an_exact_answer_scores():
    assert tool_answer_digits("1111", "1143") == 0.0
    assert tool_answer_digits("1143", "1143") == 1.0
