"""The recipe and the overrides a `cli/train_grpo.py` command line names, read before Hydra.

Hydra's own refusal of an override the recipe lacks ("Key 'router_replay' is not in struct")
names neither a documented key's `+` nor a misspelling's right name. The CLI composes the
recipe once through `compose.compose_with_overrides` first, whose refusal does, and hands
Hydra a `+key=value` on a key the recipe holds as `++key=value` (with_overrides), so both
spellings of a recipe key work. A command line with Hydra flags other than --config-name
(help, --cfg, a config path, a multirun) is left to Hydra.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

CONFIG_NAME_FLAGS = ("--config-name", "-cn")


def recipe_and_overrides(argv: Sequence[str],
                         default: str) -> Optional[Tuple[str, List[str]]]:
    """(recipe, overrides) of `argv` (sys.argv[1:]), the overrides of Hydra's own settings
    (hydra.*) dropped; None where argv holds another Hydra flag."""
    name, overrides, args = default, [], list(argv)
    while args:
        arg = args.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_NAME_FLAGS:
            if not eq:
                if not args:
                    return None                      # Hydra says what is missing
                value = args.pop(0)
            name = value
        elif arg.startswith("-"):
            return None
        elif not arg.lstrip("+~").startswith(("hydra.", "hydra/")):
            overrides.append(arg)
    return name, overrides


def with_overrides(argv: Sequence[str], given: Sequence[str],
                   taken: Sequence[str]) -> List[str]:
    """`argv` with each override of `given` (recipe_and_overrides' list) replaced by its
    counterpart in `taken` (the same overrides as Hydra took them, in order)."""
    changed = {g: t for g, t in zip(given, taken) if g != t}
    return [changed.get(arg, arg) for arg in argv]
