"""Preprocess a raw dataset into Megatron indexed prompt data (configs/datasets/NAME.yaml).

    python cli/preprocess_data.py --config tiny_arith
    python cli/preprocess_data.py --config my.yaml --strict --input data.parquet
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

# Flags that override a recipe key of the same name (dashes for underscores).
OVERRIDES = ("input", "tokenizer_name_or_path", "output_prefix", "handler_name", "prompt_type",
             "workers", "seed", "max_prompt_length", "log_interval")


def main(argv=None) -> int:
    from mindrl.data.preprocess import PreprocessError, load_config, preprocess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True,
                        help="recipe name (configs/datasets/NAME.yaml) or a yaml path")
    for key in OVERRIDES:
        kind = int if key in ("workers", "seed", "max_prompt_length", "log_interval") else str
        parser.add_argument("--" + key.replace("_", "-"), type=kind, default=None,
                            help=f"override the recipe's {key}")
    parser.add_argument("--strict", action="store_true", default=None,
                        help="any rejected row is fatal")
    parser.add_argument("--shuffle", action="store_true", default=None)
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg = load_config(args.config)
        for key in OVERRIDES + ("strict", "shuffle"):
            if getattr(args, key) is not None:
                setattr(cfg, key, getattr(args, key))
        manifest = preprocess(cfg, progress=not args.no_progress)
    except (PreprocessError, FileNotFoundError, ValueError) as e:
        parser.exit(2, f"error: {e}\n")
    counts = manifest["counts"]
    print(json.dumps({"output_prefix": cfg.output_prefix, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
