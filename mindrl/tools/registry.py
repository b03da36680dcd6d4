"""Tools by name: the shipped ones and a user's own (`module:function` or `file.py:function`).

A recipe names tools (`agent_config.tools: [calculator, python, search]`); each name resolves
to a plain function whose schema is derived from its hints and docstring (schema.py). Pool
workers receive only the specs over their pipe and resolve them the same way, so the parent
checks exactly what the workers will run. A user's tool is called by its function's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

from mindrl.rewards.user_modules import load as load_user_module

from .schema import SchemaError, function_schema

# Shipped tools: name -> "module:function". `python` runs in the sandbox (sandbox.py).
BUILTIN: Dict[str, str] = {
    "calculator": "mindrl.tools.calculator:calculator",
    "python": "mindrl.tools.python_tool:python",
    "search": "mindrl.tools.search:search",
}
SANDBOXED = frozenset({"python"})   # tools whose calls need the sandbox's layers


@dataclass(frozen=True)
class Tool:
    name: str
    spec: str              # "module:function" or "/abs/file.py:function", what workers load
    function: Callable = field(repr=False, compare=False)
    schema: dict = field(repr=False, compare=False)
    sandboxed: bool = False

    @property
    def description(self) -> str:
        return self.schema["function"]["description"]


def is_spec(name: str) -> bool:
    return ":" in name


def resolve(name_or_spec: str) -> Tool:
    """A shipped tool by name, or a user's by `module:function` / `path.py:function`.
    ValueError naming the entry and the cause when it cannot be loaded or is not a tool."""
    entry = str(name_or_spec).strip()
    if not is_spec(entry):
        if entry not in BUILTIN:
            raise ValueError(f"unknown tool {entry!r}; shipped tools: {', '.join(BUILTIN)} "
                             f"(a tool of your own: module:function)")
        spec = BUILTIN[entry]
    else:
        spec = entry
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr.isidentifier():
        raise ValueError(f"tool {entry!r} must be module:function (or path/to/file.py:function)")
    if module_name.endswith(".py"):
        module = load_user_module(module_name)   # ValueError naming the file and the cause
        from pathlib import Path

        spec = f"{Path(module_name).expanduser().resolve()}:{attr}"
    else:
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a user's module names itself
            raise ValueError(f"tool {entry!r}: module {module_name!r} cannot be imported: "
                             f"{type(e).__name__}: {e}") from e
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"tool {entry!r}: module {module_name!r} has no {attr!r}")
    name = attr if is_spec(entry) else entry
    try:
        schema = function_schema(fn, name)
    except SchemaError as e:
        raise ValueError(str(e)) from e
    return Tool(name=name, spec=spec, function=fn, schema=schema, sandboxed=name in SANDBOXED
                and not is_spec(entry))


def resolve_all(entries: Sequence[str]) -> Dict[str, Tool]:
    """name -> Tool for a recipe's list; two entries under one name is a ValueError."""
    tools: Dict[str, Tool] = {}
    for entry in entries:
        tool = resolve(entry)
        if tool.name in tools:
            raise ValueError(f"two tools are named {tool.name!r} ({tools[tool.name].spec} and "
                             f"{tool.spec}): the model calls tools by name")
        tools[tool.name] = tool
    if not tools:
        raise ValueError("no tools named: list at least one (shipped: "
                         f"{', '.join(BUILTIN)})")
    return tools


def names() -> List[str]:
    return list(BUILTIN)
