"""Write a synthetic image-question dataset in geometry3k's layout (train.parquet, test.parquet).

    python cli/make_synthetic_vl_data.py --out work/data/tiny_vl_shapes          # tiny default
    python cli/make_synthetic_vl_data.py --out work/data/vl_mixed --question mixed --size 112
Then preprocess it: examples/data/preprocess_data.sh tiny_vl_shapes
"""

import argparse
import json
import sys
from pathlib import Path

try:
    import mindrl  # noqa: F401
except ImportError:  # run from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from mindrl.data.vl_task import KINDS, write_vl_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-train", type=int, default=2048)
    parser.add_argument("--num-val", type=int, default=256, help="held-out test rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--question", choices=KINDS, default="colour",
                        help="question kind (colour: the tiny CPU task; mixed: shape, count, "
                             "digit and two-image compare questions)")
    parser.add_argument("--size", type=int, default=56, help="image side in pixels")
    args = parser.parse_args(argv)
    try:
        paths = write_vl_task(args.out, args.num_train, args.num_val, seed=args.seed,
                              question=args.question, size=args.size)
    except ValueError as e:
        parser.exit(2, f"error: {e}\n")
    print(json.dumps({split: str(path) for split, path in paths.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
