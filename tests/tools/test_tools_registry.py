"""Tool schemas derived from type hints and docstrings; tool entries resolved by name or
module:function; a call's arguments checked against the schema."""

from pathlib import Path

import pytest

from mindrl.tools import BUILTIN, resolve, resolve_all
from mindrl.tools.schema import ArgumentError, check_arguments, parse_docstring

HELPERS = str(Path(__file__).with_name("tool_helpers.py"))


def test_shipped_tools_have_schemas_from_their_hints_and_docstrings():
    tools = resolve_all(list(BUILTIN))
    assert list(tools) == ["calculator", "python", "search"]
    search = tools["search"].schema
    assert search["type"] == "function" and search["function"]["name"] == "search"
    assert search["function"]["description"].startswith("Search the local document")
    assert search["function"]["parameters"] == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "words to look for."},
                       "top_k": {"type": "integer", "default": 3,
                                 "description": "how many passages to answer (1 to 10)."}},
        "required": ["query"]}
    assert tools["python"].sandboxed and not tools["calculator"].sandboxed
    assert tools["calculator"].schema["function"]["parameters"]["required"] == ["expression"]


def test_a_users_tool_by_file_and_function():
    tool = resolve(f"{HELPERS}:typed")
    assert tool.name == "typed" and not tool.sandboxed
    params = tool.schema["function"]["parameters"]
    assert tool.description == "Echo typed arguments back."
    assert params["required"] == ["count", "ratio"]
    assert params["properties"] == {
        "count": {"type": "integer", "description": "an integer."},
        "ratio": {"type": "number", "description": "a number (an integer is fine too)."},
        "flag": {"type": "boolean", "description": "true or false.", "default": False},
        "tags": {"type": "array", "items": {"type": "string"},
                 "description": "a list of strings, or nothing.", "default": None},
        "mode": {"type": "string", "enum": ["fast", "slow"], "description": "one of two words.",
                 "default": "fast"}}


def test_a_users_tool_by_module_and_function():
    tool = resolve("mindrl.tools.calculator:calculator")
    assert tool.name == "calculator" and tool.spec == "mindrl.tools.calculator:calculator"


@pytest.mark.parametrize("entry, words", [
    ("calc", "unknown tool 'calc'; shipped tools: calculator, python, search"),
    ("no_such_module_for_mindrl:fn", "cannot be imported: ModuleNotFoundError"),
    ("mindrl.tools.calculator:nothing", "has no 'nothing'"),
    (f"{HELPERS}:no_hint", "parameter 'x' has no type hint"),
    (f"{HELPERS}:no_doc", "has no docstring"),
    (f"{HELPERS}:returns_int", "must return str"),
    ("/nowhere/tools.py:fn", "cannot be loaded: FileNotFoundError"),
    ("module:", "must be module:function"),
])
def test_entries_that_are_not_tools_are_refused_naming_why(entry, words):
    with pytest.raises(ValueError) as e:
        resolve(entry)
    assert words in str(e.value)


def test_two_tools_under_one_name_are_refused():
    with pytest.raises(ValueError, match="two tools are named 'calculator'"):
        resolve_all(["calculator", "mindrl.tools.calculator:calculator"])


def test_arguments_are_checked_against_the_schema():
    schema = resolve(f"{HELPERS}:typed").schema
    assert check_arguments(schema, {"count": 1, "ratio": 2}) == {"count": 1, "ratio": 2}
    assert check_arguments(schema, {"count": 1, "ratio": 0.5, "tags": None})["tags"] is None
    for bad, words in (({"count": 1.5, "ratio": 1}, "'count' must be an integer, got a number"),
                       ({"count": 1, "ratio": "1"}, "'ratio' must be a number, got a string"),
                       ({"count": 1, "ratio": 1, "flag": 1}, "'flag' must be true or false"),
                       ({"count": 1, "ratio": 1, "tags": ["a", 2]}, "'tags' must be a list"),
                       ({"count": 1, "ratio": 1, "extra": 0}, "unknown argument(s) 'extra'"),
                       ({"ratio": 1}, "missing argument(s) 'count'")):
        with pytest.raises(ArgumentError) as e:
            check_arguments(schema, bad)
        assert words in str(e.value)


def test_docstring_sections():
    description, params = parse_docstring("""Do it.

        Longer text.

        Args:
            a: first
                and more.
            b (int): second.

        Returns:
            nothing: not a parameter.
    """)
    assert description == "Do it." and params == {"a": "first and more.", "b": "second."}
