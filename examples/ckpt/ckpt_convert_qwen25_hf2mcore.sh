#!/usr/bin/env bash
# Qwen2.5 HF checkpoint -> Megatron-core checkpoint (torch_dist), MindSpeed-style flags.
#
# Set the paths below for a real model. As shipped it converts a tiny random-init Qwen2 model,
# which it makes with cli/make_tiny_model.py when HF_DIR does not exist yet.
# The output loads at any TP/PP: convert once for the actor (e.g. TP2 PP4) and the reference
# (e.g. TP2 PP2); TP/PP here are checked against the model and recorded, not baked in.
# Each setting may also be given in the environment (HF_DIR=... bash this-script).
set -euo pipefail

HF_DIR=${HF_DIR:-./model_from_hf/tiny_qwen25_hf}        # config.json + *.safetensors (+ tokenizer)
MCORE_DIR=${MCORE_DIR:-./model_weights/tiny_qwen25_mcore}  # written; must not exist or be empty
TOKENIZER=${TOKENIZER:-${HF_DIR}/tokenizer.json}
TP=${TP:-2}
PP=${PP:-2}
PARAMS_DTYPE=${PARAMS_DTYPE:-bf16}                         # fp32 | bf16 | fp16

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

if [ ! -d "${HF_DIR}" ]; then
  echo "no ${HF_DIR}: making a tiny random-init Qwen2 model there"
  "${PYTHON}" "${ROOT}/cli/make_tiny_model.py" --model tiny-qwen2 --tokenizer char --out "${HF_DIR}"
fi

# Qwen2.5 is a Llama-layout decoder with qkv bias: --model-type-hf llama2 --add-qkv-bias
# (as in MindSpeed's guide; --model-type-hf qwen2 works too).
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
    --tokenizer-model "${TOKENIZER}" \
    --model-type-hf llama2 \
    --params-dtype "${PARAMS_DTYPE}"
