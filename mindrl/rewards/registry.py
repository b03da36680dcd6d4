"""Name -> verifier function table.

Verifiers are looked up by name (config `verifier_function`) so that worker processes, which
receive only names over a pipe, resolve the same functions the trainer validated. They must be
top-level functions of importable modules for the same reason.
"""

from __future__ import annotations

from typing import Callable, Dict

Verifier = Callable[..., float]

VERIFIERS: Dict[str, Verifier] = {}


def register_verifier(name: str) -> Callable[[Verifier], Verifier]:
    """Decorator: register `fn(completion, label, **extra) -> float` under `name`.

    Re-registering the same function (module re-import) is allowed; a different function
    under a taken name is a ValueError, so two verifiers can never silently swap.
    """

    def decorate(fn: Verifier) -> Verifier:
        old = VERIFIERS.get(name)
        if old is not None and _qualified(old) != _qualified(fn):
            raise ValueError(
                f"verifier name {name!r} already registered by {_qualified(old)}, "
                f"cannot register {_qualified(fn)}"
            )
        VERIFIERS[name] = fn
        return fn

    return decorate


def get_verifier(name: str) -> Verifier:
    try:
        return VERIFIERS[name]
    except KeyError:
        known = ", ".join(sorted(VERIFIERS)) or "(none)"
        raise ValueError(f"unknown verifier {name!r}; known verifiers: {known}") from None


def _qualified(fn: Verifier) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
