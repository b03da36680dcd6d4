"""The recipe and the overrides a `cli/train_grpo.py` command line names, read before Hydra.

Hydra's own refusal of an override the recipe lacks ("Key 'router_replay' is not in struct")
names neither a documented key's `+` nor a misspelling's right name. The CLI composes the
recipe once through `compose.compose_recipe` first, whose refusal does. A command line with
Hydra flags other than --config-name (help, --cfg, a config path, a multirun) is left to Hydra.
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
