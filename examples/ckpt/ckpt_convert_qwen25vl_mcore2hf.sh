#!/usr/bin/env bash
# Megatron-core Qwen2.5-VL checkpoint (torch_dist, from the trainer or the hf2mcore script) ->
# HF safetensors with the on-disk names (model.* / visual.*), config.json, tokenizer and
# processor files: a folder transformers and vLLM load as Qwen2_5_VLForConditionalGeneration.
#
# MCORE_DIR may be a checkpoint root (latest_checkpointed_iteration.txt picks the checkpoint)
# or one iter_* dir. Each setting may also be given in the environment.
set -euo pipefail

TP=${TP:-1}                                     # HF output is unsharded: TP 1, PP 1
PP=${PP:-1}
MCORE_DIR=${MCORE_DIR:-./model_weights/qwen25vl_7b_mcore}
HF_OUT_DIR=${HF_OUT_DIR:-./model_from_hf/qwen25vl_7b_from_mcore}   # must not exist or be empty
TOKENIZER=${TOKENIZER:-}                         # empty: the one saved with MCORE_DIR
# (a folder with tokenizer and processor files, e.g. the original HF model's, adds both to a
# checkpoint converted without them)
PARAMS_DTYPE=${PARAMS_DTYPE:-}                   # empty: keep the checkpoint's dtype

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

OPTIONAL=()
if [ -n "${TOKENIZER}" ]; then OPTIONAL+=(--tokenizer-model "${TOKENIZER}"); fi
if [ -n "${PARAMS_DTYPE}" ]; then OPTIONAL+=(--params-dtype "${PARAMS_DTYPE}"); fi

"${PYTHON}" "${ROOT}/cli/convert_ckpt.py" \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type mg \
    --save-model-type hf \
    --target-tensor-parallel-size "${TP}" \
    --target-pipeline-parallel-size "${PP}" \
    --add-qkv-bias \
    --load-dir "${MCORE_DIR}" \
    --save-dir "${HF_OUT_DIR}" \
    --model-type-hf qwen2_5_vl \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
