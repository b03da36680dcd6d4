#!/usr/bin/env bash
# Megatron-core checkpoint (torch_dist, e.g. from the trainer or the hf2mcore script) -> HF
# safetensors shards + index, config.json and tokenizer (when one was carried or is given),
# loadable by transformers and vLLM.
#
# As shipped it converts back what ckpt_convert_qwen25_hf2mcore.sh wrote. MCORE_DIR may be a
# checkpoint root (latest_checkpointed_iteration.txt picks the checkpoint) or one iter_* dir.
# Each setting may also be given in the environment (MCORE_DIR=... bash this-script).
set -euo pipefail

MCORE_DIR=${MCORE_DIR:-./model_weights/tiny_qwen25_mcore}
HF_OUT_DIR=${HF_OUT_DIR:-./model_from_hf/tiny_qwen25_hf_from_mcore}  # must not exist or be empty
TOKENIZER=${TOKENIZER:-}          # empty: the one saved with MCORE_DIR, if any
TP=${TP:-1}                       # HF output is unsharded: TP 1, PP 1
PP=${PP:-1}
PARAMS_DTYPE=${PARAMS_DTYPE:-}    # empty: keep the checkpoint's dtype

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
    --model-type-hf llama2 \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
