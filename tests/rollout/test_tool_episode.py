"""The tool loop's episode: what it inserts after a model turn, on the char tokenizer with the
tool markers and the real calculator in its worker pool."""

import pytest

from mindrl.models.tokenizers import IM_END, build_char_tokenizer
from mindrl.models.tool_formats import get_tool_format
from mindrl.rollout.episode import SAMPLED, TurnEnd
from mindrl.rollout.tool_episode import EpisodeCounts, ToolEpisode, prompt_expression
from mindrl.tools import ToolLimits, ToolRunner

TOK = build_char_tokenizer(tool_markers=True)
CHAR = get_tool_format("char")


@pytest.fixture(scope="module")
def tools():
    with ToolRunner(["calculator"], ToolLimits(timeout_s=5), num_workers=1) as runner:
        yield runner


def _turn(prompt: str, sampled: str, turn: int = 0) -> TurnEnd:
    ids = TOK.encode(sampled, add_special_tokens=False)
    return TurnEnd(TOK.encode(prompt, add_special_tokens=False), ids, [SAMPLED] * len(ids), turn)


def _answers(suffix_ids):
    text = TOK.decode(suffix_ids, skip_special_tokens=False)
    return [a.split("</tool_response>")[0] for a in text.split("<tool_response>")[1:]]


def test_the_prompt_expression_is_the_user_text_before_the_equals_sign():
    assert prompt_expression("12+345=") == "12+345"
    assert prompt_expression("<|im_start|>system\nx=1<|im_end|>\n<|im_start|>user\n"
                             "7*6=?<|im_end|>\n<|im_start|>assistant\n") == "7*6"
    assert prompt_expression("no equals") == "no equals"


def test_an_empty_call_asks_the_first_tool_about_the_prompt(tools):
    counts = EpisodeCounts()
    episode = ToolEpisode(CHAR, TOK, tools, max_turns=2, counts=counts)
    [suffix] = episode.between([_turn("12+345=", "<tool_call></tool_call>")])
    # the char format answers inline: the model goes on in its turn right after the answer
    assert suffix == CHAR.suffix_ids(TOK, ["357"], closed=False)
    assert TOK.decode(suffix, skip_special_tokens=False) == "<tool_response>357</tool_response>"
    assert len(suffix) == 5 and _answers(suffix) == ["357"]
    assert counts.drain() == {"agent/tool_turns": 1.0, "agent/turns": 1.0}


def test_a_turn_without_a_call_ends_the_episode_and_so_does_the_last_turn(tools):
    counts = EpisodeCounts()
    episode = ToolEpisode(CHAR, TOK, tools, max_turns=2, counts=counts)
    answers = episode.between([_turn("1+2=", "3" + IM_END),
                               _turn("1+2=", "<tool_call></tool_call>", turn=1)])
    assert answers == [None, None]
    assert counts.drain() == {"agent/answered": 1.0, "agent/ended_by_max_turns": 1.0,
                              "agent/turns": 2.0}


def test_every_turn_of_a_chunk_is_answered_from_one_batch_of_calls(tools):
    before = tools.metrics()["tools/calls"] if "tools/calls" in tools.metrics() else 0.0
    episode = ToolEpisode(CHAR, TOK, tools, max_turns=3)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    out = episode.between([
        _turn("1+1=", "<tool_call></tool_call>"),
        _turn("9+9=", call + "<tool_call></tool_call>" + IM_END),     # two calls, closed
        _turn("9+9=", "<tool_call>{not json</tool_call>"),
        _turn("9+9=", '<tool_call>{"name": "shell", "arguments": {}}</tool_call>')])
    assert _answers(out[0]) == ["2"]
    assert _answers(out[1]) == ["42", "18"]
    assert out[1] == CHAR.suffix_ids(TOK, ["42", "18"], closed=True)
    assert _answers(out[2])[0].startswith("error: the tool call is not valid JSON")
    assert _answers(out[3])[0].startswith("error: unknown tool 'shell'; tools: calculator")
    # the malformed call never reached the pool; the other four calls did, as one batch
    assert tools.metrics()["tools/calls"] - before == 4


def test_a_call_with_a_bad_expression_answers_an_error_and_the_episode_goes_on(tools):
    episode = ToolEpisode(CHAR, TOK, tools, max_turns=2)
    [suffix] = episode.between([_turn("9**9**9**9=", "<tool_call></tool_call>")])
    assert _answers(suffix)[0].startswith("error:")
