"""Plain mappings -> typed dataclasses, collecting every key/type problem with its dotted key.

Kept generic (driven by the dataclass annotations) so that adding a field to the schema is
the only step needed to accept, type-check and spell-check a new recipe key.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from mindrl.config.errors import STRUCTURE, Problem

_FAILED = object()


def suggest(name: str, valid: typing.Iterable[str]) -> str:
    """'did you mean X?' for the nearest valid name, else the list of valid names."""
    valid = sorted(valid)
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]!r}?"
    return "valid names: " + ", ".join(valid)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Union:
        inner = [a for a in get_args(tp) if a is not type(None)]
        return " or ".join(_describe(a) for a in inner) + " (or null)"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"a list of {_describe(get_args(tp)[0])}" if get_args(tp) else "a list"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}.get(tp, str(tp))


def _convert(tp: Any, value: Any, key: str, problems: list[Problem]) -> Any:
    """Value checked against annotation tp; on mismatch records a Problem, returns _FAILED."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Union:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            if value is None:
                pass
            else:
                return _convert(inner[0], value, key, problems)
    elif origin is Literal:
        if isinstance(value, bool) and ("on" if value else "off") in get_args(tp):
            return "on" if value else "off"     # YAML reads a bare `off` as a boolean
        if value in get_args(tp):
            return value
        if isinstance(value, str):
            problems.append(Problem(key, "is not a known choice", suggest(value, get_args(tp)),
                                    value, STRUCTURE))
            return _FAILED
    elif origin in (list, tuple):
        if isinstance(value, (list, tuple)):
            (item_tp,) = get_args(tp) or (Any,)
            items = [_convert(item_tp, v, f"{key}[{i}]", problems) for i, v in enumerate(value)]
            return _FAILED if any(v is _FAILED for v in items) else items
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, Mapping):
            return build(tp, value, key, problems)
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):   # YAML reads a bare `off` (or `on`) as a boolean
            return "on" if value else "off"
    else:  # pragma: no cover - schema author error
        raise TypeError(f"unsupported annotation {tp!r} at {key}")
    problems.append(Problem(key, f"has type {type(value).__name__}, expected {_describe(tp)}",
                            f"set {key} to {_describe(tp)}", value, STRUCTURE))
    return _FAILED


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def check_partial(cls: type, data: Mapping, prefix: str,
                  problems: list[Problem]) -> dict[str, Any]:
    """The keys of data that are fields of cls, converted; unknown or mistyped keys recorded."""
    if not isinstance(data, Mapping):
        problems.append(Problem(prefix or "<root>", f"has type {type(data).__name__}, "
                                "expected a mapping", f"make {prefix or 'the recipe'} a mapping "
                                "of keys to values", data, STRUCTURE))
        return {}
    types = field_types(cls)
    out: dict[str, Any] = {}
    for name, value in data.items():
        key = _join(prefix, str(name))
        if name not in types:
            problems.append(Problem(key, "is not a known key", suggest(str(name), types),
                                    category=STRUCTURE))
            continue
        converted = _convert(types[name], value, key, problems)
        if converted is not _FAILED:
            out[name] = converted
    return out


def build(cls: type, data: Mapping, prefix: str, problems: list[Problem]) -> Any:
    """A cls instance from data, or _FAILED after recording why (unknown, mistyped, missing)."""
    before = len(problems)
    values = check_partial(cls, data, prefix, problems)
    for f in dataclasses.fields(cls):
        missing = (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        if f.init and missing and f.name not in values and (
                not isinstance(data, Mapping) or f.name not in data):
            key = _join(prefix, f.name)
            problems.append(Problem(key, "is required but missing",
                                    f"add {key} ({_describe(field_types(cls)[f.name])})",
                                    category=STRUCTURE))
    if len(problems) > before:
        return _FAILED
    return cls(**values)


def failed(value: Any) -> bool:
    return value is _FAILED
