"""Verifiers of a user's own, from a module on the path or a .py file anywhere.

`rl_config.verifier_modules` lists them; loading one runs its `register_verifier` calls, so the
names it registers can be listed in `verifier_function`. The same list is loaded by the config
check (the names exist before anything starts), the trainer's reward and every verifier worker
(which receive only names over their pipe). A file is imported under a name made from its
absolute path, so loading it twice (the check, then the reward) registers the same functions.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import List, Sequence


def is_file(spec: str) -> bool:
    return spec.endswith(".py")


def absolute(specs: Sequence[str]) -> List[str]:
    """Files as absolute paths (read against this process's working directory), so processes
    started elsewhere load the same ones; module names as they are."""
    return [str(Path(s).expanduser().resolve()) if is_file(s) else s for s in specs]


def load(spec: str) -> ModuleType:
    """Import one entry; ValueError naming it and the cause when it cannot be."""
    try:
        if not is_file(spec):
            return importlib.import_module(spec)
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no file {path}")
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
        name = f"mindrl_user_verifiers_{path.stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        found = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    except Exception as e:
        raise ValueError(f"verifier module {spec!r} cannot be loaded: "
                         f"{type(e).__name__}: {e}") from e


def load_all(specs: Sequence[str]) -> None:
    for spec in specs:
        load(spec)
