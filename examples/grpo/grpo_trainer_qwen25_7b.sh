#!/usr/bin/env bash
# Single-node GRPO on Qwen2.5-7B (8 GPUs): convert the weights once, then train.
# Paths are the recipe's (configs/rlxf/grpo_qwen25_7b.yaml); override any key as key=value.
set -euo pipefail
cd "$(dirname "$0")/../.."
HF_DIR=${HF_DIR:-./model_from_hf/qwen25-7b}
MCORE_DIR=${MCORE_DIR:-./model_weights/qwen25-7b-mcore}
if [ ! -f "$MCORE_DIR/latest_checkpointed_iteration.txt" ]; then
  python cli/convert_ckpt.py --use-mcore-models --model-type GPT --load-model-type hf \
    --save-model-type mg --target-tensor-parallel-size 4 --target-pipeline-parallel-size 1 \
    --add-qkv-bias --load-dir "$HF_DIR" --save-dir "$MCORE_DIR" --model-type-hf qwen2 \
    --params-dtype bf16
fi
python cli/train_grpo.py --config-name grpo_qwen25_7b "$@"
