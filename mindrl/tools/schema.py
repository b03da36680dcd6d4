"""A tool's JSON schema, derived from its function's type hints and docstring, and the check of
a call's arguments against it.

A tool is a plain function: every parameter has a type hint (str, int, float, bool, list[...],
dict, Optional[...], Literal[...]), the return hint is str, and the docstring's first
paragraph says what it does; an `Args:` section ("name: what it is", continuation lines
indented) describes the parameters. What the model is shown is exactly this schema, in the
function-calling layout chat templates take:
{"type": "function", "function": {"name", "description", "parameters"}}.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable, Dict, List, Mapping, Tuple

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean",
           list: "array", dict: "object"}
_NONE = type(None)


class SchemaError(ValueError):
    """A function cannot be a tool as written (named, with the reason)."""


class ArgumentError(ValueError):
    """A call's arguments do not fit the tool's schema."""


def type_schema(hint: Any, where: str) -> dict:
    """JSON schema of one type hint."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        rest = [a for a in args if a is not _NONE]
        if len(rest) == 1 and len(args) == 2:   # Optional[X]
            return type_schema(rest[0], where)
        return {"anyOf": [type_schema(a, where) for a in args]}
    if origin is typing.Literal:
        kinds = {type(a) for a in args}
        if len(kinds) != 1 or next(iter(kinds)) not in _SIMPLE:
            raise SchemaError(f"{where}: Literal values must share one simple type")
        return {"type": _SIMPLE[next(iter(kinds))], "enum": list(args)}
    if origin in (list, List, typing.Sequence):
        out = {"type": "array"}
        if args:
            out["items"] = type_schema(args[0], where)
        return out
    if origin in (dict, Dict, typing.Mapping):
        return {"type": "object"}
    raise SchemaError(f"{where}: type hint {hint!r} has no JSON schema "
                      f"(use str, int, float, bool, list[...], dict, Optional or Literal)")


def parse_docstring(doc: str) -> Tuple[str, Dict[str, str]]:
    """(description, {parameter: description}) from a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    section = next((i for i, line in enumerate(lines)
                    if re.match(r"^(Args|Arguments|Parameters):\s*$", line)), len(lines))
    head = "\n".join(lines[:section]).strip()
    description = " ".join(head.split("\n\n")[0].split())
    params: Dict[str, str] = {}
    current, indent = None, None
    for line in lines[section + 1:]:
        if not line.strip():
            continue
        if not line[0].isspace():   # the next section (Returns:, Raises:) ends Args
            break
        here = len(line) - len(line.lstrip())
        match = re.match(r"^\s+(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", line)
        if match and (indent is None or here <= indent):
            current, indent = match.group(1), here
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return description, params


def function_schema(fn: Callable, name: str) -> dict:
    """The tool's schema; SchemaError naming what is missing."""
    where = f"tool {name!r} ({getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)})"
    if not callable(fn):
        raise SchemaError(f"{where} is not a function")
    description, docs = parse_docstring(fn.__doc__ or "")
    if not description:
        raise SchemaError(f"{where} has no docstring: its first line is what the model is "
                          f"told the tool does")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # noqa: BLE001 - an unresolvable hint names the tool
        raise SchemaError(f"{where}: its type hints cannot be read: {e}") from e
    properties, required = {}, []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise SchemaError(f"{where}: parameter {pname!r} must be a plain named parameter")
        if pname not in hints:
            raise SchemaError(f"{where}: parameter {pname!r} has no type hint")
        prop = type_schema(hints[pname], f"{where}, parameter {pname!r}")
        if pname in docs:
            prop["description"] = docs[pname]
        if param.default is param.empty:
            required.append(pname)
        elif param.default is None or isinstance(param.default, (str, int, float, bool)):
            prop["default"] = param.default   # None: the call may pass null
        properties[pname] = prop
    if hints.get("return", str) is not str:
        raise SchemaError(f"{where} must return str (its answer to the model), "
                          f"its hint says {hints['return']!r}")
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": parameters}}


def check_arguments(schema: dict, arguments: Any) -> Dict[str, Any]:
    """The arguments as keywords if they fit the schema; ArgumentError saying what does not."""
    params = schema["function"]["parameters"]
    if not isinstance(arguments, Mapping):
        raise ArgumentError(f"arguments must be a JSON object, got {_json_type(arguments)}")
    unknown = sorted(set(arguments) - set(params["properties"]))
    if unknown:
        raise ArgumentError(f"unknown argument(s) {', '.join(map(repr, unknown))}; "
                            f"{_expects(params)}")
    missing = [p for p in params["required"] if p not in arguments]
    if missing:
        raise ArgumentError(f"missing argument(s) {', '.join(map(repr, missing))}; "
                            f"{_expects(params)}")
    for key, value in arguments.items():
        prop = params["properties"][key]
        if not fits(prop, value):
            raise ArgumentError(f"argument {key!r} must be {_describe(prop)}, "
                                f"got {_json_type(value)}")
    return dict(arguments)


def fits(prop: dict, value: Any) -> bool:
    if "anyOf" in prop:
        return any(fits(p, value) for p in prop["anyOf"])
    if value is None:
        return prop.get("default", "no default") is None
    kind = prop.get("type")
    ok = {"string": isinstance(value, str),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool),
          "boolean": isinstance(value, bool),
          "array": isinstance(value, list),
          "object": isinstance(value, dict)}.get(kind, True)
    if ok and "enum" in prop:
        ok = value in prop["enum"]
    if ok and kind == "array" and "items" in prop:
        ok = all(fits(prop["items"], v) for v in value)
    return ok


def _describe(prop: dict) -> str:
    if "anyOf" in prop:
        return " or ".join(_describe(p) for p in prop["anyOf"])
    if "enum" in prop:
        return "one of " + ", ".join(map(repr, prop["enum"]))
    return {"string": "a string", "integer": "an integer", "number": "a number",
            "boolean": "true or false", "array": "a list", "object": "an object"}.get(
        prop.get("type"), "valid")


def _expects(params: dict) -> str:
    names = ", ".join(f"{k} ({_describe(v)})" for k, v in params["properties"].items())
    return f"the tool takes: {names or 'no arguments'}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for kind, text in ((str, "a string"), (int, "an integer"), (float, "a number"),
                       (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return text
    return type(value).__name__
