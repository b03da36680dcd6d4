#!/usr/bin/env bash
# Qwen2.5-VL HF checkpoint (Qwen2_5_VLForConditionalGeneration) -> Megatron-core checkpoint
# (torch_dist), MindSpeed-style flags.
#
# HF_DIR is a downloaded model folder: config.json, *.safetensors, the tokenizer files and the
# processor files (preprocessor_config.json, chat_template.json), which travel with the
# checkpoint. A folder written by a bare save_pretrained of the model (weights and config, no
# processor) converts too, with a note: training and preprocessing need the processor, so set
# TOKENIZER to the original model's folder (tokenizer and processor files are taken from it)
# or copy those files later into the folder the recipe's tokenizer_name_or_path names.
# The vision tower is copied as is; the language model is laid out for Megatron.
# The output loads at any TP/PP: TP/PP here are checked against the model and recorded.
# Each setting may also be given in the environment (HF_DIR=... bash this-script).
set -euo pipefail

TP=${TP:-2}
PP=${PP:-2}
HF_DIR=${HF_DIR:-./model_from_hf/Qwen2.5-VL-7B-Instruct}
MCORE_DIR=${MCORE_DIR:-./model_weights/qwen25vl_7b_mcore}   # written; must not exist or be empty
TOKENIZER=${TOKENIZER:-}        # empty: the tokenizer/processor files in HF_DIR, if any
PARAMS_DTYPE=${PARAMS_DTYPE:-bf16}                          # fp32 | bf16 | fp16

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

OPTIONAL=()
if [ -n "${TOKENIZER}" ]; then OPTIONAL+=(--tokenizer-model "${TOKENIZER}"); fi

# The language model of Qwen2.5-VL is a Qwen2 decoder: qkv bias, so --add-qkv-bias.
"${PYTHON}" "${ROOT}/cli/convert_ckpt.py" \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type hf \
    --save-model-type mg \
    --target-tensor-parallel-size "${TP}" \
    --target-pipeline-parallel-size "${PP}" \
    --add-qkv-bias \
    --load-dir "${HF_DIR}" \
    --save-dir "${MCORE_DIR}" \
    --model-type-hf qwen2_5_vl \
    --params-dtype "${PARAMS_DTYPE}" \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
