"""Name -> function tables, so a config string picks the maths.

Every registry in mindrl/algorithms is one of these: config validation can ask
`name in REGISTRY` and list `sorted(REGISTRY)`, and a typo fails with the known names.
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
    """A dict of name -> callable that names its kind in error messages."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, *names: str) -> Callable[[F], F]:
        """Decorator adding a function under one or more names (aliases)."""

        def add(fn: F) -> F:
            for name in names:
                if name in self:
                    raise ValueError(f"{self.kind} {name!r} is already registered")
                self[name] = fn
            return fn

        return add

    def lookup(self, name: str) -> Callable:
        """The function registered as `name`; ValueError listing known names otherwise."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self))}") from None
