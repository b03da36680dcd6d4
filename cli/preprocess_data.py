"""Preprocess a raw dataset into Megatron indexed prompt data (configs/datasets/NAME.yaml).

    python cli/preprocess_data.py --config tiny_arith
    python cli/preprocess_data.py --config my.yaml --strict --input data.parquet
    python cli/preprocess_data.py --config geo3k_qwen25vl --min-pixels 3136 --max-pixels 50176

Every key of a recipe (mindrl.data.preprocess.PreprocessConfig) is a flag of the same name,
dashes for underscores, typed as the field: --strict / --no-strict, --map-keys prompt=question
label=answer, --dataset-additional-keys labels.
"""

import argparse
import json
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import mindrl  # noqa: F401
except ImportError:  # run from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _key_values(text: str):
    """One `KEY=VALUE` item of a mapping flag (--map-keys prompt=question label=answer)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


class _Mapping(argparse.Action):
    """KEY=VALUE items into one dict."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, dict(values))


def _flag_kwargs(annotation) -> dict:
    """argparse settings for a recipe field's type: a number, a string, a switch, a list of
    strings, or a mapping of `KEY=VALUE` items; None (not given) leaves the recipe's value."""
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        annotation = args[0]                                  # Optional[X] -> X
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin in (list, typing.List):
        return {"nargs": "*", "metavar": "VALUE"}
    if origin in (dict, typing.Dict):
        return {"nargs": "*", "type": _key_values, "action": _Mapping, "metavar": "KEY=VALUE"}
    if annotation in (int, float, str):
        return {"type": annotation}
    raise TypeError(f"no command-line form for a recipe field of type {annotation!r}")


def add_recipe_flags(parser: argparse.ArgumentParser, config_cls) -> list:
    """One flag per field of the recipe's dataclass (dashes for underscores), typed by the
    field: every key a recipe has can be given on the command line. Returns the keys."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(config_cls)
    keys = []
    for f in dataclasses.fields(config_cls):
        kwargs = _flag_kwargs(hints[f.name])
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None,
                            help=f"override the recipe's {f.name}", **kwargs)
        keys.append(f.name)
    return keys


def recipe_overrides(args: argparse.Namespace, keys) -> dict:
    """The recipe keys the command line set."""
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def main(argv=None) -> int:
    from dataclasses import asdict

    from mindrl.data.preprocess import PreprocessConfig, PreprocessError, load_config, preprocess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True,
                        help="recipe name (configs/datasets/NAME.yaml) or a yaml path")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    keys = add_recipe_flags(parser, PreprocessConfig)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg = load_config(args.config)
        overrides = recipe_overrides(args, keys)
        if overrides:          # validated as one recipe: a flag is refused as a yaml key is
            flags = " ".join("--" + k.replace("_", "-") for k in overrides)
            cfg = PreprocessConfig.from_dict({**asdict(cfg), **overrides},
                                             source=f"{args.config} with {flags}")
        manifest = preprocess(cfg, progress=not args.no_progress)
    except (PreprocessError, FileNotFoundError, ValueError) as e:
        parser.exit(2, f"error: {e}\n")
    counts = manifest["counts"]
    print(json.dumps({"output_prefix": cfg.output_prefix, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
