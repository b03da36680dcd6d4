"""Write a random-init HF checkpoint for a configs/model shape (no hub needed).

    python cli/make_tiny_model.py --model tiny-qwen2 --tokenizer char --out /tmp/tiny-qwen2
"""

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import mindrl  # noqa: F401
except ImportError:  # run from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from transformers.utils import logging as hf_logging

    from mindrl.config.model_spec import available_models
    from mindrl.models.tiny import DTYPES, make_tiny_model
    from mindrl.models.tokenizers import TOKENIZER_KINDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=available_models(),
                        help="a configs/model/NAME.yaml shape")
    parser.add_argument("--tokenizer", required=True, choices=TOKENIZER_KINDS)
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--head", default="lm", choices=["lm", "scalar"],
                        help="scalar: a reward model (*ForSequenceClassification, 1 label)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a non-empty output directory")
    args = parser.parse_args(argv)
    hf_logging.disable_progress_bar()
    try:
        out = make_tiny_model(args.model, args.tokenizer, args.out, seed=args.seed,
                              dtype=args.dtype, overwrite=args.overwrite, head=args.head)
    except (ValueError, FileExistsError) as e:
        parser.exit(2, f"error: {e}\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
