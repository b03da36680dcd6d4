"""`agent_config.environment` (`module:Class` or `path/to/file.py:Class`) imported: what the
config check refuses before anything starts and what the run's episodes are made from
(rollout/environment.py). It lives here, not beside the protocol, because config may not
import the rollout layer; both load it through this one function, so the check and the run
cannot disagree on what a spec names.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

from mindrl.rewards.user_modules import is_file
from mindrl.rewards.user_modules import load as load_file

METHODS = ("reset", "step")      # the Environment protocol's methods


def _module(name: str) -> ModuleType:
    if is_file(name):
        try:
            return load_file(name)
        except ValueError as e:   # the file loader's own words name a verifier module
            cause = e.__cause__ or e
            raise ValueError(f"file {name!r} cannot be loaded: {type(cause).__name__}: "
                             f"{cause}") from cause
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - a user's module names its own failure
        raise ValueError(f"module {name!r} cannot be imported: {type(e).__name__}: {e}") from e


def _has_protocol(obj) -> bool:
    return inspect.isclass(obj) and all(callable(getattr(obj, m, None)) for m in METHODS)


def environments_in(module: ModuleType) -> list:
    """The names of `module`'s classes that have reset and step, sorted."""
    return sorted(name for name, obj in vars(module).items()
                  if not name.startswith("_") and _has_protocol(obj))


def load_environment(spec: str) -> type:
    """The class `spec` names; ValueError saying why not: the module cannot be imported, it
    has no such name (with the environment classes it has), or the name is not a class with
    reset and step."""
    module_name, _, attr = str(spec).strip().rpartition(":")
    if not module_name or not attr.isidentifier():
        raise ValueError(f"{spec!r} is not module:Class (or path/to/file.py:Class)")
    module = _module(module_name)
    where = f"{'file' if is_file(module_name) else 'module'} {module_name!r}"
    found = environments_in(module)
    have = (f"its classes with reset and step: {', '.join(found)}" if found
            else "it has no class with reset and step")
    if not hasattr(module, attr):
        raise ValueError(f"{where} has no {attr!r}; {have}")
    obj = getattr(module, attr)
    if not inspect.isclass(obj):
        raise ValueError(f"{attr!r} in {where} is a {type(obj).__name__}, not a class "
                         f"(an environment is a class made with no arguments); {have}")
    missing = [m for m in METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise ValueError(f"class {attr!r} in {where} has no {' or '.join(missing)} "
                         f"(an environment has reset(sample) and step(turn_text)); {have}")
    return obj
