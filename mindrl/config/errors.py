"""ConfigError: the one exception a bad recipe raises, naming key, value and fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

# Problem categories. "cluster" and "paths" depend on the machine rather than the recipe,
# so plan (dry-run) mode reports them as warnings instead of refusing to plan.
STRUCTURE, CONSISTENCY, CLUSTER, PATHS = "structure", "consistency", "cluster", "paths"
MACHINE_DEPENDENT = (CLUSTER, PATHS)

_UNSET = object()


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe: where (dotted key), what value, why, and how to fix it."""

    key: str
    message: str
    fix: str
    value: Any = _UNSET
    category: str = CONSISTENCY

    def __str__(self) -> str:
        where = self.key if self.value is _UNSET else f"{self.key}={self.value!r}"
        return f"{where}: {self.message}. Fix: {self.fix}"


class ConfigError(ValueError):
    """Raised once, before anything starts, listing every problem found."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        if not self.problems:
            raise ValueError("ConfigError needs at least one problem")
        if len(self.problems) == 1:
            text = str(self.problems[0])
        else:
            text = f"{len(self.problems)} config problems:\n" + "\n".join(
                f"  - {p}" for p in self.problems)
        super().__init__(text)

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.problems]


def dedupe(problems: Iterable[Problem]) -> list[Problem]:
    """The problems in order, each (key, message) once: roles that inherit one
    megatron_training key would otherwise report it once per role."""
    seen, out = set(), []
    for p in problems:
        if (p.key, p.message) not in seen:
            seen.add((p.key, p.message))
            out.append(p)
    return out
