"""Dataset handlers: turn one raw row into (question text, label, extra), or reject it.

A handler knows a dataset family's field layout and answer format; templating and
tokenizing happen later (mindrl.data.preprocess), so one handler serves every template.
``map_keys`` renames fields (logical name -> the row's column), so a new dataset with the
same shape but other column names needs only config. Handlers raise RowRejected with a short
reason code; the preprocessor counts reasons and writes them to the rejects file.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

HandlerResult = Tuple[str, str, Dict[str, Any]]
Handler = Callable[[Mapping[str, Any], Mapping[str, str]], HandlerResult]


class RowRejected(Exception):
    """A row that cannot become a training prompt; ``reason`` is a short, countable code."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


_HANDLERS: Dict[str, Handler] = {}
_DEFAULT_KEYS: Dict[str, Dict[str, str]] = {}
_VISION: set = set()
# Columns that hold a row's images in the layouts we know (geometry3k: "images").
IMAGE_COLUMNS = ("images", "image")
VL_RECIPE_HINT = ("use a VL recipe (handler_name: geometry3k_vl, e.g. "
                  "configs/datasets/geo3k_qwen25vl.yaml) to keep them")


def register(name: str, default_keys: Dict[str, str], vision: bool = False):
    def deco(fn: Handler) -> Handler:
        _HANDLERS[name] = fn if vision else _refusing_images(name, fn)
        _DEFAULT_KEYS[name] = dict(default_keys)
        if vision:
            _VISION.add(name)
        return fn
    return deco


def _refusing_images(name: str, fn: Handler) -> Handler:
    """A text handler that rejects rows with images instead of silently dropping them."""
    def handler(row, keys) -> HandlerResult:
        for column in IMAGE_COLUMNS:
            images = row.get(column)
            if images is not None and not (isinstance(images, (list, tuple)) and not images):
                count = len(images) if isinstance(images, (list, tuple)) else 1
                raise RowRejected("has_images", f"{column!r} holds {count} image(s) that the "
                                                f"text handler {name!r} would drop; "
                                                f"{VL_RECIPE_HINT}")
        return fn(row, keys)
    handler.__doc__ = fn.__doc__
    return handler


def available_handlers() -> list:
    return sorted(_HANDLERS)


def is_vision_handler(name: str) -> bool:
    """True for handlers whose rows carry images (extra["images"])."""
    get_handler(name)
    return name in _VISION


def default_map_keys(name: str) -> Dict[str, str]:
    get_handler(name)
    return dict(_DEFAULT_KEYS[name])


def get_handler(name: str) -> Handler:
    if name not in _HANDLERS:
        raise ValueError(f"unknown handler_name {name!r}; known: {available_handlers()}")
    return _HANDLERS[name]


def resolve_map_keys(name: str, map_keys: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The handler's defaults overlaid with config; an empty column name switches a key off."""
    keys = default_map_keys(name)
    for logical, column in (map_keys or {}).items():
        if logical not in keys:
            raise ValueError(f"handler {name!r}: unknown map_keys entry {logical!r}; "
                             f"known: {sorted(keys)}")
        keys[logical] = column
    return keys


def handle_row(name: str, row: Mapping[str, Any],
               map_keys: Optional[Mapping[str, str]] = None) -> HandlerResult:
    return get_handler(name)(row, resolve_map_keys(name, map_keys))


# ---------------------------------------------------------------------------- helpers

def _field(row: Mapping[str, Any], keys: Mapping[str, str], logical: str,
           required: bool = True) -> Any:
    column = keys.get(logical)
    if not column:
        if required:
            raise RowRejected("missing_key", f"no column mapped for {logical!r}")
        return None
    value = row.get(column)
    if value is None:
        if required:
            raise RowRejected("missing_key", f"{column!r} (for {logical!r}) is missing")
        return None
    return value


def _text(value: Any, column: str) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RowRejected("undecodable", f"{column!r}: {e.reason}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise RowRejected("bad_type", f"{column!r} is {type(value).__name__}, expected text")
    return value


def _question_and_label(row, keys) -> Tuple[str, str]:
    question = _text(_field(row, keys, "prompt"), keys["prompt"])
    label = _text(_field(row, keys, "label"), keys["label"])
    return question, label


# ---------------------------------------------------------------------------- handlers

@register("r1_math", {"prompt": "problem", "label": "answer"})
def r1_math(row, keys) -> HandlerResult:
    """Orz / DeepScaleR / MATH rows: a problem and its final (short) answer."""
    question, label = _question_and_label(row, keys)
    return question.strip(), label.strip(), {}


_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)


@register("gsm8k", {"prompt": "question", "label": "answer"})
def gsm8k(row, keys) -> HandlerResult:
    """GSM8K: the answer field is a worked solution ending in '#### <number>'."""
    question, solution = _question_and_label(row, keys)
    match = _GSM8K_FINAL.search(solution)
    if not match:
        raise RowRejected("no_final_answer", "answer has no '#### <number>' line")
    return question.strip(), match.group(1).replace(",", "").strip(), {"solution": solution}


COUNTDOWN_QUESTION = ("Using the numbers {numbers}, create an equation that equals {target}. "
                      "You can use basic arithmetic operations (+, -, *, /) and each number can "
                      "only be used once. Show your work in <think> </think> tags and return the "
                      "final equation in <answer> </answer> tags, for example "
                      "<answer> (1 + 2) / 3 </answer>.")


@register("countdown", {"numbers": "nums", "target": "target"})
def countdown(row, keys) -> HandlerResult:
    """Countdown: the question is generated; the label is JSON the reward function parses."""
    numbers = _field(row, keys, "numbers")
    target = _field(row, keys, "target")
    try:
        numbers = [int(n) for n in numbers]
        target = int(target)
    except (TypeError, ValueError):
        raise RowRejected("bad_type", "numbers must be a list of integers and target an "
                                      "integer") from None
    if not numbers:
        raise RowRejected("empty_label", "no numbers")
    question = COUNTDOWN_QUESTION.format(numbers=numbers, target=target)
    return question, json.dumps({"numbers": numbers, "target": target}), {}


@register("geometry3k", {"prompt": "problem", "label": "answer"})
def geometry3k(row, keys) -> HandlerResult:
    """Geometry3K rows without images (rows with images are refused: see geometry3k_vl)."""
    question, label = _question_and_label(row, keys)
    return question.strip(), label.strip(), {}


@register("geometry3k_vl", {"prompt": "problem", "label": "answer", "images": "images"},
          vision=True)
def geometry3k_vl(row, keys) -> HandlerResult:
    """Geometry3K layout with images: the problem keeps its `<image>` markers (the template
    splits them into image parts); extra["images"] is the raw list ({bytes, path} / bytes /
    path per image), empty for a row without images."""
    question, label = _question_and_label(row, keys)
    images = _field(row, keys, "images", required=False)
    if images is None:
        images = []
    elif not isinstance(images, (list, tuple)):
        images = [images]
    return question.strip(), label.strip(), {"images": list(images)}


@register("generic", {"prompt": "prompt", "query": "", "response": "", "system": "",
                      "label": "label"})
def generic(row, keys) -> HandlerResult:
    """Any instruction-style data: prompt (+ optional query appended), system, response."""
    question = _text(_field(row, keys, "prompt"), keys["prompt"])
    query = _field(row, keys, "query", required=False)
    if query is not None and _text(query, keys["query"]).strip():
        question = f"{question}\n{_text(query, keys['query'])}" if question else query
    label = _text(_field(row, keys, "label"), keys["label"])
    extra = {}
    for optional in ("system", "response"):
        value = _field(row, keys, optional, required=False)
        if value is not None:
            extra[optional] = _text(value, keys[optional])
    return question, label, extra


# DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k) wraps each problem in its own instruction
# (answer on a last `Answer:` line); a tool-use template asks for a \boxed{} answer instead, so
# the wrapper is cut off and the template's instruction is the only one the model reads.
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer (without quotes) where $Answer is the "
               "answer to the problem.")
DAPO_SUFFIX = "Remember to put your answer on its own line after \"Answer:\"."


def _path_field(row: Mapping[str, Any], keys: Mapping[str, str], logical: str) -> Any:
    """A field whose column may be a dotted path into nested dicts (reward_model.ground_truth),
    the column's own name tried first."""
    column = keys.get(logical)
    if not column:
        raise RowRejected("missing_key", f"no column mapped for {logical!r}")
    if column in row:
        value = row[column]
    else:
        value = row
        for part in column.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
            if value is None:
                break
    if value is None:
        raise RowRejected("missing_key", f"{column!r} (for {logical!r}) is missing")
    return value


def _user_text(value: Any, column: str) -> str:
    """The question of a prompt column: text, or a chat message list (its last user turn)."""
    if isinstance(value, (list, tuple)):
        users = [m for m in value if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users:
            raise RowRejected("bad_type", f"{column!r} is a message list without a user turn")
        value = users[-1].get("content")
    return _text(value, column)


@register("dapo_math", {"prompt": "prompt", "label": "reward_model.ground_truth"})
def dapo_math(row, keys) -> HandlerResult:
    """DAPO-Math-17k / verl-layout rows: `prompt` a chat message list (or text), the label at
    reward_model.ground_truth (or a plain column); DAPO's `Answer:` instruction around the
    problem is cut off, so the recipe's template says how to answer."""
    question = _user_text(_path_field(row, keys, "prompt"), keys["prompt"]).strip()
    if question.startswith(DAPO_PREFIX):
        question = question[len(DAPO_PREFIX):].strip()
    if question.endswith(DAPO_SUFFIX):
        question = question[:-len(DAPO_SUFFIX)].strip()
    label = _text(_path_field(row, keys, "label"), keys["label"]).strip()
    return question, label, {}


@register("search_qa", {"prompt": "question", "label": "golden_answers"})
def search_qa(row, keys) -> HandlerResult:
    """Open-domain QA (NQ, HotpotQA, ... in FlashRAG / Search-R1's layout: `question` and a
    list of `golden_answers`; Search-R1's parquet has them at reward_model.ground_truth.target
    too): the label is the JSON list of accepted answers, which `tool_answer_em` reads."""
    question = _user_text(_path_field(row, keys, "prompt"), keys["prompt"]).strip()
    answers = _path_field(row, keys, "label")
    if isinstance(answers, Mapping) and "target" in answers:
        answers = answers["target"]
    if isinstance(answers, (str, bytes, int, float)) and not isinstance(answers, bool):
        answers = [answers]
    if not isinstance(answers, (list, tuple)):
        raise RowRejected("bad_type", f"{keys['label']!r} is {type(answers).__name__}, "
                                      f"expected a list of answers")
    answers = [a for a in (_text(a, keys["label"]).strip() for a in answers) if a]
    if not answers:
        raise RowRejected("empty_label", "no accepted answer")
    if question and not question.endswith("?"):
        question += "?"
    return question, json.dumps(answers, ensure_ascii=False), {}
