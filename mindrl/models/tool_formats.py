"""Tool-call layouts byte-exact to the chat templates: what a multi-turn episode inserts.

A format knows, for one chat template, the tokens that end a model turn and a call, how a
model turn's calls are read (the hermes rules), the first prompt with the tools' schemas in the
system message, and the ids to insert after a model turn (the tools' answers in the template's
layout, up to the next ``<|im_start|>assistant\\n``; an environment's observation as the next
user turn, ``observation_ids``). Formats (``TOOL_FORMATS``):

* ``qwen25``: Qwen2.5-Instruct's template (models/chat_templates/qwen25_instruct.jinja).
* ``qwen3``: Qwen3's (models/chat_templates/qwen3.jinja), thinking mode. The template keeps
  the reasoning of every assistant turn after the last user query, so in a tool-only episode
  (one user query, then model and tool turns) the sampled ``<think>`` blocks stay in the
  history as sampled; a new user query would make the template drop them, which an
  append-only episode cannot do: an environment's observation is such a query, so after one
  the earlier turns' ``<think>`` blocks stay where the template would drop them.
* ``char``: for the tiny tokenizers (they need the four tool markers,
  ``tokenizers.add_tool_markers``), made for a random-init model: the first prompt is the
  Qwen2.5 layout with the char tokenizer's system prompt ("You are a helpful assistant."), but
  a run's prompts carry no schemas (``schemas_in_prompt``: a tiny model cannot read them, and
  the prompt stays the single-turn recipe's); a call with an empty body is an ``EmptyCall``
  (the episode calls its first tool on the prompt's expression); and the answers follow the
  call inside the model's turn (``inline_answers``: ``<tool_call></tool_call><tool_response>
  357</tool_response>`` then the model goes on), so the answer to copy is a few tokens back,
  not behind a user turn's 15 tokens of headers; an environment's observation goes inline
  the same way (``<tool_response>no</tool_response>``).

Token in, token out: the ids the engine sampled are never decoded and re-encoded; only the
inserted text is encoded, and only once. The layout's own text is encoded as the template's
text is (its special tokens are single ids); everything from outside (a tool's answer, the
user's prompt, the system prompt, the tool schemas) is encoded as plain text, with any special
token in it read as characters, so an answer that prints ``<|im_end|>`` or
``</tool_response>`` cannot end a turn. Text runs are encoded whole between the layout's
special tokens, as the tokenizer splits the template's rendering, so for text without special
tokens in it the ids are the template's exactly (tests/models/test_tool_formats.py).

Where the ids differ from a re-rendering by the template, by design: a tool's answer holding a
special-token string (the template's ids would hold the special token); a Qwen3 turn whose
``<think>`` block is not in the template's canonical layout (``<think>\\n`` reasoning
``\\n</think>\\n\\n`` answer: the template re-renders it that way); and Qwen3 with
``enable_thinking=False``, whose template drops the empty think block from earlier turns
(this module supports thinking mode only).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from mindrl.models.tokenizers import IM_END, IM_START, TOOL_MARKERS, official_chat_template

TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END = TOOL_MARKERS
THINK, THINK_END = "<think>", "</think>"

# The tools block of the system message, as Qwen2.5's and Qwen3's templates write it around
# the schemas (one JSON object a line, `tojson`: json.dumps with ensure_ascii=False).
TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n"
              "<tools>")
TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name "
              "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
              "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
CHAR_DEFAULT_SYSTEM = "You are a helpful assistant."   # tokenizers.CHAT_TEMPLATE's


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: Dict[str, Any]


@dataclass(frozen=True)
class CallError:
    """A malformed call: ``message`` is what the model is answered ("error: ..."), ``text``
    the call's text as the model wrote it."""

    message: str
    text: str


@dataclass(frozen=True)
class EmptyCall:
    """A call with nothing between its markers, in a format that allows it (``char``): the
    episode calls its first tool on the prompt's own expression (rollout/tool_episode.py), so
    that a random-init model can find a call by chance (two tokens, no JSON)."""

    text: str


Call = Union[ToolCall, CallError, EmptyCall]
# A piece of text to encode: (text, layout). Layout text is the format's own (its special
# tokens are single ids); the rest is read as plain characters.
Segment = Tuple[str, bool]


def _read_call(body: str, text: str) -> Call:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return CallError(f"error: the tool call is not valid JSON ({e.msg} at line {e.lineno} "
                         f"column {e.colno})", text)
    if not isinstance(obj, dict):
        return CallError(f"error: a tool call is a JSON object with \"name\" and "
                         f"\"arguments\", not a {type(obj).__name__}", text)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return CallError("error: the tool call has no \"name\" (a non-empty string)", text)
    if "arguments" not in obj:
        return CallError(f"error: the call of {name!r} has no \"arguments\" (a JSON object)",
                         text)
    args = obj["arguments"]
    if not isinstance(args, dict):
        return CallError(f"error: the \"arguments\" of the call of {name!r} must be a JSON "
                         f"object, not a {type(args).__name__}", text)
    return ToolCall(name, args)


def _is_empty_call(text: str) -> bool:
    return (text.startswith(TOOL_CALL) and text.endswith(TOOL_CALL_END)
            and not text[len(TOOL_CALL):-len(TOOL_CALL_END)].strip())


def parse_hermes_calls(text: str) -> List[Call]:
    """Every ``<tool_call>`` JSON ``</tool_call>`` block of ``text``, in order: a ToolCall for
    a JSON object with a non-empty string "name" and an object "arguments", else a CallError.
    A ``<tool_call>`` not closed before the next one or the end of the text (a cut tail), and a
    ``</tool_call>`` with no opening, are CallErrors too: nothing is dropped silently."""
    out: List[Call] = []
    pos = 0
    while True:
        start = text.find(TOOL_CALL, pos)
        stray = text.find(TOOL_CALL_END, pos)
        if stray != -1 and (start == -1 or stray < start):
            out.append(CallError(f"error: {TOOL_CALL_END} without a {TOOL_CALL} before it",
                                 text[pos:stray + len(TOOL_CALL_END)]))
            pos = stray + len(TOOL_CALL_END)
            continue
        if start == -1:
            return out
        body_at = start + len(TOOL_CALL)
        end = text.find(TOOL_CALL_END, body_at)
        reopen = text.find(TOOL_CALL, body_at)
        if end == -1 or (reopen != -1 and reopen < end):
            stop = len(text) if end == -1 else reopen
            out.append(CallError(f"error: {TOOL_CALL} is not closed by {TOOL_CALL_END}",
                                 text[start:stop]))
            if end == -1:
                return out
            pos = reopen
            continue
        out.append(_read_call(text[body_at:end].strip(),
                              text[start:end + len(TOOL_CALL_END)]))
        pos = end + len(TOOL_CALL_END)


# ---------------------------------------------------------------------------- encoding

def _plain_ids(tokenizer, text: str) -> List[int]:
    """``text`` encoded with no added token recognised: the tokenizer's normalizer,
    pre-tokenizer and model alone, which is what it runs between added tokens."""
    if not text:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(f"{type(tokenizer).__name__} has no backend_tokenizer: tool formats "
                        f"need a fast (tokenizers-backed) tokenizer")
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    pieces = (backend.pre_tokenizer.pre_tokenize_str(text) if backend.pre_tokenizer is not None
              else [(text, (0, len(text)))])
    return [t.id for piece, _ in pieces for t in backend.model.tokenize(piece)]


def _added_splitter(tokenizer) -> Tuple[Optional["re.Pattern[str]"], Dict[str, int]]:
    added = {tok.content: i for i, tok in tokenizer.added_tokens_decoder.items()}
    if not added:
        return None, added
    alternatives = sorted(added, key=len, reverse=True)   # leftmost, then longest
    return re.compile("|".join(re.escape(a) for a in alternatives)), added


def encode_segments(tokenizer, segments: Sequence[Segment]) -> List[int]:
    """The ids of ``segments`` joined: layout text split at the tokenizer's added tokens (each
    one id), every run of text between them (layout and plain text together) encoded whole,
    plain text's special-token strings read as characters."""
    pattern, added = _added_splitter(tokenizer)
    flags = tokenizer.added_tokens_decoder
    ids: List[int] = []
    run: List[str] = []

    def flush():
        ids.extend(_plain_ids(tokenizer, "".join(run)))
        run.clear()

    for text, layout in segments:
        if not layout or pattern is None:
            run.append(text)
            continue
        pos = 0
        for m in pattern.finditer(text):
            token_id = added[m.group(0)]
            token = flags[token_id]
            if token.lstrip or token.rstrip or token.single_word or token.normalized:
                raise ValueError(f"added token {token.content!r} strips or matches by word: "
                                 f"its layout cannot be reproduced here")
            run.append(text[pos:m.start()])
            flush()
            ids.append(token_id)
            pos = m.end()
        run.append(text[pos:])
    flush()
    return ids


def _single_id(tokenizer, token: str) -> int:
    ids = encode_segments(tokenizer, [(token, True)])
    if len(ids) != 1:
        raise ValueError(f"{token!r} is {len(ids)} tokens in this tokenizer, not one")
    return ids[0]


# ---------------------------------------------------------------------------- formats

@dataclass(frozen=True)
class ToolFormat:
    """One chat template's tool-call layout (hermes: ``<tool_call>`` JSON ``</tool_call>`` in
    the model's turn, ``<tool_response>`` answers in a user turn)."""

    name: str
    template: Optional[str]            # the shipped chat template it reproduces (or None)
    default_system: Optional[str]      # the system prompt when the messages give none
    required_tokens: Tuple[str, ...]   # each must be one token of the tokenizer
    reasoning: bool = False            # <think>...</think> precedes the answer (Qwen3)
    missing_hint: str = ""             # how to get a tokenizer with required_tokens
    empty_calls: bool = False          # an empty call body is an EmptyCall, not an error
    schemas_in_prompt: bool = True     # the first prompt carries the tools' schemas
    inline_answers: bool = False       # answers follow the call in the model's turn

    # -- tokens

    def check_tokenizer(self, tokenizer) -> None:
        """ValueError unless every token the layout needs is one token of ``tokenizer``."""
        bad = []
        for token in self.required_tokens:
            try:
                _single_id(tokenizer, token)
            except ValueError:
                bad.append(token)
        if bad:
            raise ValueError(f"tool format {self.name!r}: {bad} must each be one token of the "
                             f"tokenizer ({type(tokenizer).__name__}, {len(tokenizer)} ids)"
                             + (f"; {self.missing_hint}" if self.missing_hint else ""))

    def turn_end_ids(self, tokenizer) -> List[int]:
        """The id that ends a model turn (``<|im_end|>``)."""
        return [_single_id(tokenizer, IM_END)]

    def call_end_ids(self, tokenizer) -> List[int]:
        """The id that ends a call (``</tool_call>``): a stop id for an episode that runs each
        call as soon as it is written."""
        return [_single_id(tokenizer, TOOL_CALL_END)]

    # -- the model's turn

    def answer_text(self, text: str) -> str:
        """The part of a model turn's text that holds its calls: all of it, or for a reasoning
        format what follows the last ``</think>`` (nothing while a ``<think>`` is open)."""
        text = text[:-len(IM_END)] if text.endswith(IM_END) else text
        if not self.reasoning:
            return text
        if THINK_END in text:
            return text.rsplit(THINK_END, 1)[1]
        return "" if THINK in text else text

    def parse_calls(self, text: str) -> List[Call]:
        """The calls of one model turn's text (hermes rules, ``parse_hermes_calls``); a
        reasoning format reads the answer after the thinking only."""
        calls = parse_hermes_calls(self.answer_text(text))
        if not self.empty_calls:
            return calls
        return [EmptyCall(c.text) if isinstance(c, CallError) and _is_empty_call(c.text) else c
                for c in calls]

    def parse_turn(self, tokenizer, ids: Sequence[int]) -> List[Call]:
        """``parse_calls`` of the ids the engine sampled in one turn (decoded to read them;
        the ids themselves carry forward untouched)."""
        return self.parse_calls(tokenizer.decode(list(ids), skip_special_tokens=False))

    # -- the first prompt

    def system_segments(self, tools: Optional[Sequence[Mapping]],
                        system: Optional[str]) -> List[Segment]:
        """The system message's content as the template writes it (the schemas in it), as
        segments; [] where the template writes no system message."""
        if not tools:
            content = system if system is not None else self.default_system
            return [] if content is None else [(content, False)]
        out: List[Segment] = []
        head = system if system is not None else self.default_system
        if head is not None:
            out += [(head, False), ("\n\n", True)]
        out.append((TOOLS_HEAD, True))
        for tool in tools:
            out += [("\n", True), (json.dumps(dict(tool), ensure_ascii=False), False)]
        out.append((TOOLS_TAIL, True))
        return out

    def system_text(self, tools: Optional[Sequence[Mapping]] = None,
                    system: Optional[str] = None) -> Optional[str]:
        """The system message's text with the tools' schemas in it, or None where the template
        writes no system message (Qwen3 with neither tools nor a system prompt)."""
        segments = self.system_segments(tools, system)
        return "".join(t for t, _ in segments) if segments or tools else None

    def prompt_segments(self, messages: Sequence[Mapping[str, str]],
                        tools: Optional[Sequence[Mapping]] = None) -> List[Segment]:
        """The first engine prompt: ``messages`` (an optional system message, then user and
        system messages with string content) with the tools, then the generation prompt."""
        messages = list(messages)
        system = None
        if messages and messages[0].get("role") == "system":
            system = messages.pop(0)["content"]
        out: List[Segment] = []
        sys_segments = self.system_segments(tools, system)
        if sys_segments:
            out += [(f"{IM_START}system\n", True), *sys_segments, (f"{IM_END}\n", True)]
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content")
            if role not in ("user", "system") or not isinstance(content, str):
                raise ValueError(f"tool format {self.name!r}: the first prompt takes user and "
                                 f"system messages with string content; message {i} is "
                                 f"{role!r} with {type(content).__name__} content")
            out += [(f"{IM_START}{role}\n", True), (content, False), (f"{IM_END}\n", True)]
        if not any(m["role"] == "user" for m in messages):
            raise ValueError(f"tool format {self.name!r}: the first prompt needs a user message")
        out.append((f"{IM_START}assistant\n", True))
        return out

    def prompt_ids(self, tokenizer, messages: Sequence[Mapping[str, str]],
                   tools: Optional[Sequence[Mapping]] = None) -> List[int]:
        """The first engine prompt's ids: the template's
        ``apply_chat_template(messages, tools=tools, add_generation_prompt=True)``."""
        self.check_tokenizer(tokenizer)
        return encode_segments(tokenizer, self.prompt_segments(messages, tools))

    # -- between turns

    def suffix_segments(self, outputs: Sequence[str], closed: bool = True) -> List[Segment]:
        """What follows a model turn: the tools' answers (one per call, in order; a CallError's
        message for a malformed one) in one user turn, then the next generation prompt.
        ``closed``: the turn ended on ``<|im_end|>`` (sampled); else (it stopped at a call's
        end) the ``<|im_end|>`` is inserted first."""
        if not outputs:
            raise ValueError("no tool answers to insert: a turn without calls ends the episode")
        if self.inline_answers:
            for answer in outputs:
                if not isinstance(answer, str):
                    raise TypeError(f"a tool answer is text, not {type(answer).__name__}")
            return [seg for answer in outputs for seg in
                    ((TOOL_RESPONSE, True), (answer, False), (TOOL_RESPONSE_END, True))]
        out: List[Segment] = [] if closed else [(IM_END, True)]
        out.append((f"\n{IM_START}user", True))
        for answer in outputs:
            if not isinstance(answer, str):
                raise TypeError(f"a tool answer is text, not {type(answer).__name__}")
            out += [(f"\n{TOOL_RESPONSE}\n", True), (answer, False),
                    (f"\n{TOOL_RESPONSE_END}", True)]
        out.append((f"{IM_END}\n{IM_START}assistant\n", True))
        return out

    def suffix_text(self, outputs: Sequence[str], closed: bool = True) -> str:
        return "".join(t for t, _ in self.suffix_segments(outputs, closed))

    def suffix_ids(self, tokenizer, outputs: Sequence[str], closed: bool = True) -> List[int]:
        """The ids to insert after a model turn (starting with the newline after its
        ``<|im_end|>``, which the engine does not sample), answers encoded as plain text."""
        return encode_segments(tokenizer, self.suffix_segments(outputs, closed))

    def observation_segments(self, text: str, closed: bool = True) -> List[Segment]:
        """What follows a model turn in an environment's episode (rollout/environment.py):
        the observation as the next user turn, then the next generation prompt (what the
        template writes for a user message and ``add_generation_prompt``); ``closed`` as in
        ``suffix_segments``. An inline format writes it as a tool answer is written, in the
        model's turn."""
        if not isinstance(text, str):
            raise TypeError(f"an observation is text, not {type(text).__name__}")
        if self.inline_answers:
            return [(TOOL_RESPONSE, True), (text, False), (TOOL_RESPONSE_END, True)]
        out: List[Segment] = [] if closed else [(IM_END, True)]
        return out + [(f"\n{IM_START}user\n", True), (text, False),
                      (f"{IM_END}\n{IM_START}assistant\n", True)]

    def observation_ids(self, tokenizer, text: str, closed: bool = True) -> List[int]:
        """The ids of ``observation_segments``, the observation encoded as plain text (a
        special-token string in it is characters, so it cannot end a turn)."""
        return encode_segments(tokenizer, self.observation_segments(text, closed))


_QWEN_TOKENS = (IM_START, IM_END, TOOL_CALL, TOOL_CALL_END)

TOOL_FORMATS: Dict[str, ToolFormat] = {
    "qwen25": ToolFormat("qwen25", template="qwen25", default_system=QWEN25_DEFAULT_SYSTEM,
                         required_tokens=_QWEN_TOKENS,
                         missing_hint="use the Qwen2.5 tokenizer (tokenizers.build_qwen25_"
                                      "tokenizer or the model's own)"),
    "qwen3": ToolFormat("qwen3", template="qwen3", default_system=None,
                        required_tokens=_QWEN_TOKENS + (TOOL_RESPONSE, TOOL_RESPONSE_END,
                                                        THINK, THINK_END),
                        reasoning=True,
                        missing_hint="use the Qwen3 tokenizer (tokenizers.build_qwen3_"
                                     "tokenizer or the model's own)"),
    "char": ToolFormat("char", template=None, default_system=CHAR_DEFAULT_SYSTEM,
                       required_tokens=(IM_START, IM_END) + TOOL_MARKERS,
                       empty_calls=True, schemas_in_prompt=False, inline_answers=True,
                       missing_hint="build it with tokenizers.build_char_tokenizer("
                                    "tool_markers=True) or add_tool_markers(tokenizer)"),
}


def get_tool_format(name: str) -> ToolFormat:
    """The format named ``name``; ValueError naming the formats that exist."""
    try:
        return TOOL_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown tool format {name!r}; the formats are "
                         f"{', '.join(TOOL_FORMATS)}") from None


def format_chat_template(fmt: ToolFormat) -> str:
    """The shipped chat template ``fmt`` reproduces (Qwen's own text)."""
    if fmt.template is None:
        raise ValueError(f"tool format {fmt.name!r} follows the Qwen2.5 layout with its own "
                         f"system prompt; it has no chat template of its own")
    return official_chat_template(fmt.template)
