#!/usr/bin/env bash
# Qwen3 HF checkpoint (dense, or Qwen3-MoE with MODEL_TYPE_HF=qwen3-moe) -> Megatron-core
# checkpoint (torch_dist), MindSpeed-style flags.
#
# Set the paths below (or in the environment: HF_DIR=... bash this-script) for a real model,
# e.g. a downloaded Qwen3-8B or Qwen3-30B-A3B folder. As shipped it converts a tiny random-init
# Qwen3 (tiny-qwen3-moe with MODEL_TYPE_HF=qwen3-moe), which it makes with
# cli/make_tiny_model.py when HF_DIR does not exist yet.
# The output loads at any TP/PP/EP: TP/PP/EP here are checked against the model and recorded,
# not baked in. A MoE folder's experts may be saved per expert (save_pretrained) or stacked.
set -euo pipefail

MODEL_TYPE_HF=${MODEL_TYPE_HF:-qwen3}  # qwen3 (dense) | qwen3-moe
if [ "${MODEL_TYPE_HF}" = qwen3 ]; then TINY=tiny-qwen3; else TINY=tiny-qwen3-moe; fi
TINY_DIR=${TINY//-/_}
HF_DIR=${HF_DIR:-./model_from_hf/${TINY_DIR}_hf}       # config.json + *.safetensors (+ tokenizer)
MCORE_DIR=${MCORE_DIR:-./model_weights/${TINY_DIR}_mcore}  # written; must not exist or be empty
TOKENIZER=${TOKENIZER:-}           # empty: the tokenizer files in HF_DIR, if any
MODEL=${MODEL:-}                   # a configs/model name to check the shape against (optional)
TP=${TP:-2}
PP=${PP:-2}
EP=${EP:-1}                        # MoE only: must divide the expert count
FIRST=${FIRST:-}                   # uneven pipeline: the first / last stage's layer count
LAST=${LAST:-}                     # (Qwen3-235B-A22B at PP=16: FIRST=5 LAST=5, 6 between)
PARAMS_DTYPE=${PARAMS_DTYPE:-bf16}                     # fp32 | bf16 | fp16

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "${ROOT}/.venv/bin/python" ]; then PYTHON=${ROOT}/.venv/bin/python; else PYTHON=python; fi
fi

if [ ! -d "${HF_DIR}" ]; then
  echo "no ${HF_DIR}: making a tiny random-init ${TINY} model there"
  "${PYTHON}" "${ROOT}/cli/make_tiny_model.py" --model "${TINY}" --tokenizer char --out "${HF_DIR}"
fi

OPTIONAL=()
if [ -n "${TOKENIZER}" ]; then OPTIONAL+=(--tokenizer-model "${TOKENIZER}"); fi
if [ -n "${MODEL}" ]; then OPTIONAL+=(--model "${MODEL}"); fi
if [ "${EP}" != 1 ]; then OPTIONAL+=(--target-expert-parallel-size "${EP}"); fi
if [ -n "${FIRST}" ]; then OPTIONAL+=(--decoder-first-pipeline-num-layers "${FIRST}"); fi
if [ -n "${LAST}" ]; then OPTIONAL+=(--decoder-last-pipeline-num-layers "${LAST}"); fi

# Qwen3 has q/k norms and no qkv bias: --model-type-hf qwen3 / qwen3-moe, no --add-qkv-bias.
"${PYTHON}" "${ROOT}/cli/convert_ckpt.py" \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type hf \
    --save-model-type mg \
    --target-tensor-parallel-size "${TP}" \
    --target-pipeline-parallel-size "${PP}" \
    --load-dir "${HF_DIR}" \
    --save-dir "${MCORE_DIR}" \
    --model-type-hf "${MODEL_TYPE_HF}" \
    --params-dtype "${PARAMS_DTYPE}" \
    ${OPTIONAL[@]+"${OPTIONAL[@]}"}
