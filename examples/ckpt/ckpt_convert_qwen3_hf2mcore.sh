#!/usr/bin/env bash
# Qwen3 (dense) HF checkpoint -> Megatron-core checkpoint (torch_dist), MindSpeed-style flags.
#
# Set the paths below (or in the environment: HF_DIR=... bash this-script) for a real model,
# e.g. a downloaded Qwen3-8B folder. As shipped it converts a tiny random-init Qwen3, which it
# makes with cli/make_tiny_model.py when HF_DIR does not exist yet.
# The output loads at any TP/PP: TP/PP here are checked against the model and recorded, not
# baked in. Qwen3-MoE is not converted yet (dense only).
set -euo pipefail

HF_DIR=${HF_DIR:-./model_from_hf/tiny_qwen3_hf}        # config.json + *.safetensors (+ tokenizer)
MCORE_DIR=${MCORE_DIR:-./model_weights/tiny_qwen3_mcore}  # written; must not exist or be empty
TOKENIZER=${TOKENIZER:-}           # empty: the tokenizer files in HF_DIR, if any
TP=${TP:-2}
PP=${PP:-2}
PARAMS_DTYPE=${PARAMS_DTYPE:-bf16}                     # fp32 | bf16 | fp16

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

if [ ! -d "${HF_DIR}" ]; then
  echo "no ${HF_DIR}: making a tiny random-init Qwen3 model there"
  "${PYTHON}" "${ROOT}/cli/make_tiny_model.py" --model tiny-qwen3 --tokenizer char --out "${HF_DIR}"
fi

OPTIONAL=()
if [ -n "${TOKENIZER}" ]; then OPTIONAL+=(--tokenizer-model "${TOKENIZER}"); fi

# Qwen3 has q/k norms and no qkv bias: --model-type-hf qwen3, no --add-qkv-bias.
"${PYTHON}" "${ROOT}/cli/convert_ckpt.py" \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type hf \
    --save-model-type mg \
    --target-tensor-parallel-size "${TP}" \
    --target-pipeline-parallel-size "${PP}" \
    --load-dir "${HF_DIR}" \
    --save-dir "${MCORE_DIR}" \
    --model-type-hf qwen3 \
    --params-dtype "${PARAMS_DTYPE}" \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
