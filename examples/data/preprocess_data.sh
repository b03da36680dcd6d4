#!/usr/bin/env bash
# Preprocess a dataset recipe: examples/data/preprocess_data.sh NAME [extra cli flags]
#
# NAME is configs/datasets/NAME.yaml (r1_zero_qwen25_7b, gsm8k_qwen25, countdown_qwen25,
# tiny_arith, geo3k_qwen25vl, tiny_vl_shapes; the agent recipes' dapo_math_17k_qwen25 / _qwen3,
# aime2024_qwen25 / _qwen3 and search_r1_nq_hotpotqa_qwen25, which also writes the search
# corpus; the distillation recipes' opd_dapo_math_17k_qwen3 and opd_aime2024_qwen3). Relative paths in a recipe are relative to the current directory; run from the
# repository root. tiny_arith works offline as shipped once its
# tokenizer exists:
#   python cli/make_tiny_model.py --model tiny-qwen2 --tokenizer char --out work/models/tiny-qwen2-hf
# tiny_vl_shapes needs the tiny VL model directory and the synthetic image data:
#   python cli/make_tiny_model.py --model tiny-qwen25vl --tokenizer char --out work/models/tiny-qwen25vl-hf
#   python cli/make_synthetic_vl_data.py --out work/data/tiny_vl_shapes
# Output: <output_prefix>_input_ids.{bin,idx}, _labels.{bin,idx}, _manifest.json, _rejects.jsonl
# (image recipes also _images.{bin,idx}: the resized images' PNG bytes, one document per row)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 NAME [--strict] [--input PATH] [--output-prefix PREFIX] ..." >&2
  exit 2
fi
NAME=$1
shift

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

"${PYTHON}" "${ROOT}/cli/preprocess_data.py" --config "${NAME}" "$@"
