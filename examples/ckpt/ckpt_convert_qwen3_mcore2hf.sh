#!/usr/bin/env bash
# Qwen3 Megatron-core checkpoint (dense, or Qwen3-MoE with MODEL_TYPE_HF=qwen3-moe; torch_dist,
# e.g. from the trainer or the hf2mcore script) -> HF safetensors shards + index, config.json
# and tokenizer (when one was carried or is given), loadable by transformers and vLLM. A MoE
# model's experts are written per expert, as save_pretrained writes them.
#
# As shipped it converts back what ckpt_convert_qwen3_hf2mcore.sh wrote. MCORE_DIR may be a
# checkpoint root (latest_checkpointed_iteration.txt picks the checkpoint) or one iter_* dir.
# Each setting may also be given in the environment (MCORE_DIR=... bash this-script).
set -euo pipefail

MODEL_TYPE_HF=${MODEL_TYPE_HF:-qwen3}  # qwen3 (dense) | qwen3-moe
if [ "${MODEL_TYPE_HF}" = qwen3 ]; then TINY_DIR=tiny_qwen3; else TINY_DIR=tiny_qwen3_moe; fi
MCORE_DIR=${MCORE_DIR:-./model_weights/${TINY_DIR}_mcore}
HF_OUT_DIR=${HF_OUT_DIR:-./model_from_hf/${TINY_DIR}_hf_from_mcore}  # must not exist or be empty
TOKENIZER=${TOKENIZER:-}           # empty: the one saved with MCORE_DIR, if any
PARAMS_DTYPE=${PARAMS_DTYPE:-}     # empty: keep the checkpoint's dtype

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

OPTIONAL=()
if [ -n "${TOKENIZER}" ]; then OPTIONAL+=(--tokenizer-model "${TOKENIZER}"); fi
if [ -n "${PARAMS_DTYPE}" ]; then OPTIONAL+=(--params-dtype "${PARAMS_DTYPE}"); fi

# HF output is unsharded: TP 1, PP 1.
"${PYTHON}" "${ROOT}/cli/convert_ckpt.py" \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type mg \
    --save-model-type hf \
    --target-tensor-parallel-size 1 \
    --target-pipeline-parallel-size 1 \
    --load-dir "${MCORE_DIR}" \
    --save-dir "${HF_OUT_DIR}" \
    --model-type-hf "${MODEL_TYPE_HF}" \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
