"""An agent run's prompts carry the tools' schemas exactly as Qwen's chat templates write them:
a dataset prompt rendered without tools (data/templates.py, with or without a system message),
tokenized, then given the tools by trainer/agent.system_with_tools, has the ids of
`apply_chat_template(messages, tools=...)`."""

import pytest

from mindrl.data.templates import PromptTemplate
from mindrl.models import tokenizers as T
from mindrl.models.tool_formats import get_tool_format
from mindrl.tools import resolve_all
from mindrl.trainer.agent import system_with_tools

SCHEMAS = [t.schema for t in resolve_all(["calculator", "python"]).values()]


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "qwen25_tokenizer_cache"
    return {"qwen25": T.build_qwen25_tokenizer(cache_dir=cache),
            "qwen3": T.build_qwen3_tokenizer(cache_dir=cache)}


@pytest.mark.parametrize("fmt_name", ["qwen25", "qwen3"])
@pytest.mark.parametrize("system", [None, "Solve it; put the answer in \\boxed{}."])
def test_the_prompt_with_tools_is_the_templates(toks, fmt_name, system):
    tok, fmt = toks[fmt_name], get_tool_format(fmt_name)
    question = "What is 17 * 23? <|im_end|> is text here"
    text = PromptTemplate("t", system=system).render(question)
    finish = system_with_tools(fmt, tok, SCHEMAS)
    got = finish(tok(text)["input_ids"])
    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": question}]
    want = tok.apply_chat_template(messages, tools=SCHEMAS, tokenize=True,
                                   add_generation_prompt=True,
                                   chat_template=T.official_chat_template(fmt_name))
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    assert got == want
    assert finish(got[:0] + tok(text)["input_ids"]) == got        # the same every time
